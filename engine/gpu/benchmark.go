package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Measurements for benchmarks. `strata bench engine` (bench/enginebench)
// and this package's Go benchmarks time the GPU through these functions,
// so a figure in NOTES.md and one the command prints come from the same
// code. Device-side costs are timed with CUDA events on one stream, what a
// caller waits for with the host clock. None of them is meant to run
// concurrently with other passes of the same Model: they change its graph
// setting for their duration and time the device as if alone on it.

// CopyBandwidth measures device-to-device copy bandwidth on dev: bytes read
// plus bytes written per second over iters back-to-back copies of n bytes
// (after one untimed copy), timed with events on a stream of its own. It is
// the ceiling of any bandwidth-bound kernel: a decode GEMV reads its
// weights once, so its effective bandwidth ÷ this is how close it runs to
// the memory system's limit.
func CopyBandwidth(dev *cudadrv.Device, n int64, iters int) (float64, error) {
	if n <= 0 || iters < 1 {
		return 0, fmt.Errorf("copy bandwidth: %d bytes x %d copies", n, iters)
	}
	var bw float64
	err := onNewStream(dev, func(c *cudadrv.Ctx, s cudadrv.Stream) (err error) {
		src, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(src) })
		dst, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(dst) })
		if err := c.MemsetD8(src, 1, n, s); err != nil {
			return err
		}
		el, err := measureEvents(c, s, iters, func() error { return c.CopyDtoD(dst, src, n, s) })
		if err != nil {
			return err
		}
		bw = 2 * float64(n) / el.Seconds()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("device-to-device copy bandwidth: %w", err)
	}
	return bw, nil
}

// HostToDevicePeak measures pinned host-to-device copy bandwidth on dev:
// bytes per second over iters back-to-back copies of n bytes from
// page-locked host memory (after one untimed copy), timed with events. It
// is the ceiling a streamed layer's copy can reach, the denominator of
// every "PCIe limit" ratio.
func HostToDevicePeak(dev *cudadrv.Device, n int64, iters int) (float64, error) {
	if n <= 0 || iters < 1 {
		return 0, fmt.Errorf("host-to-device peak: %d bytes x %d copies", n, iters)
	}
	var bw float64
	err := onNewStream(dev, func(c *cudadrv.Ctx, s cudadrv.Stream) (err error) {
		h, err := c.HostAlloc(int(n), 0)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.FreeHost(h) })
		d, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.Free(d) })
		el, err := measureEvents(c, s, iters, func() error { return c.CopyHtoD(d, h.Bytes(), s) })
		if err != nil {
			return err
		}
		bw = float64(n) / el.Seconds()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pinned host-to-device peak: %w", err)
	}
	return bw, nil
}

// onNewStream runs fn on dev's goroutine with a stream of its own,
// destroyed after fn returns.
func onNewStream(dev *cudadrv.Device, fn func(c *cudadrv.Ctx, s cudadrv.Stream) error) error {
	return dev.Do(func(c *cudadrv.Ctx) (err error) {
		s, err := c.NewStream(cudadrv.StreamNonBlocking)
		if err != nil {
			return err
		}
		defer keepFirst(&err, func() error { return c.DestroyStream(s) })
		return fn(c, s)
	})
}

// keepFirst runs a deferred release and keeps its error if none came
// before.
func keepFirst(err *error, release func() error) {
	if rerr := release(); *err == nil {
		*err = rerr
	}
}

// measureEvents runs fn once to warm up, then iters times between two
// events on s, and returns the device time per iteration.
func measureEvents(c *cudadrv.Ctx, s cudadrv.Stream, iters int, fn func() error) (el time.Duration, err error) {
	if err := fn(); err != nil {
		return 0, err
	}
	e0, err := c.NewEvent(cudadrv.EventDefault)
	if err != nil {
		return 0, err
	}
	defer keepFirst(&err, func() error { return c.DestroyEvent(e0) })
	e1, err := c.NewEvent(cudadrv.EventDefault)
	if err != nil {
		return 0, err
	}
	defer keepFirst(&err, func() error { return c.DestroyEvent(e1) })
	if err := c.Record(e0, s); err != nil {
		return 0, err
	}
	for range iters {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := c.Record(e1, s); err != nil {
		return 0, err
	}
	if err := c.EventSync(e1); err != nil {
		return 0, err
	}
	msf, err := c.Elapsed(e0, e1)
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(msf) * 1e6 / float64(iters)), nil
}

// measurePrompt is a deterministic prompt of n ids in [1, vocab), different
// for each seed.
func measurePrompt(vocab, n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + (i*131+seed*17+7)%(vocab-1))
	}
	return p
}

// measureGreedy is the largest logit's index (lowest on ties, NaN never
// chosen), the token a greedy decoder feeds back.
func measureGreedy(v []float32) int32 {
	best, bi := float32(math.Inf(-1)), 0
	for i, x := range v {
		if x > best {
			best, bi = x, i
		}
	}
	return int32(bi)
}

// setGraphs switches graph replay on or off and returns the old setting
// (NoGraphs is read under the lock by Forward).
func (m *Model) setGraphs(on bool) (wasOff bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	wasOff = m.opts.NoGraphs
	m.opts.NoGraphs = !on
	return wasOff
}

func (m *Model) restoreGraphs(off bool) {
	m.mu.Lock()
	m.opts.NoGraphs = off
	m.mu.Unlock()
}

// DecodeOptions say how TimeDecode runs. Zero fields take the defaults.
type DecodeOptions struct {
	// Batch is the number of sequences advanced per pass (default 1; at
	// most MaxSeqs).
	Batch int
	// Prompt is each sequence's prompt length, run untimed first
	// (default 16).
	Prompt int
	// Warmup decode passes run untimed after the prompt, so a graph is
	// captured and every buffer sized before the clock starts (default 2).
	Warmup int
	// Steps are the timed decode passes (default 8).
	Steps int
	// NoGraphs launches the passes kernel by kernel even where the model
	// would replay a CUDA graph.
	NoGraphs bool
	// Greedy asks every decode pass for its greedy tokens (Step.Greedy):
	// the token is selected on the device and only the token ids are
	// downloaded. Without it each pass downloads its logit rows into the
	// steps, and the greedy choice fed back is made on the host, outside
	// the timed interval.
	Greedy bool
}

// DecodeTiming is what TimeDecode measured.
type DecodeTiming struct {
	Batch, Steps int
	// PerPass is the mean wall time of one decode pass: one token for each
	// of Batch sequences, from Forward's call to its return with the
	// logits (or, with Greedy, the token ids) on the host.
	PerPass time.Duration
	// TokensPerSecond is Batch ÷ PerPass.
	TokensPerSecond float64
	// Graph reports whether every timed pass was replayed from a CUDA
	// graph; GraphCopies whether those graphs also held the pass's upload
	// and download (CopiesNote says why not when the driver refused).
	Graph, GraphCopies bool
	CopiesNote         string
	// DeviceSelect reports whether every timed pass selected its tokens
	// on the device (Greedy).
	DeviceSelect bool
	// Phases splits PerPass at the host's hand-over points.
	Phases HostPhases
	// PromptLogits are sequence 0's logits after its prompt: two models
	// given the same options saw the same input, so their PromptLogits
	// compare them.
	PromptLogits []float32
}

// HostPhases splits the mean wall time of a pass at the points where work
// changes hands, to show where a step's time beyond the device's goes.
// They add up to the pass's wall time (less the few nanoseconds of taking
// the model's lock).
type HostPhases struct {
	// ToDevice is from Forward holding the model's lock to the device
	// goroutine running the pass: Device.Do's hand-off to the goroutine
	// locked to the context's thread.
	ToDevice time.Duration
	// Enqueue is the device goroutine filling the pinned token, position
	// and slot buffer and issuing the pass: the graph launch (with the
	// copies inside it, or around it), or every copy and kernel launch.
	Enqueue time.Duration
	// Launch is the part of Enqueue up to the graph launch's return
	// (graph replays only; 0 otherwise).
	Launch time.Duration
	// Wait is from the pass enqueued to the stream drained: the device's
	// work, the latency of the device starting it and of the driver
	// noticing its end.
	Wait time.Duration
	// FromDevice is from the drained stream to Device.Do's return in the
	// caller (with tier B, also the slot bookkeeping).
	FromDevice time.Duration
	// Scatter is copying the logit rows into the steps (and choosing a
	// host greedy token where asked), or handing out the token ids.
	Scatter time.Duration
}

// Phases of a Forward call that a stepTrace stamps.
const (
	phaseEnter    = iota // Forward holds the model's lock
	phaseDo              // the device goroutine runs the pass
	phaseLaunched        // the graph launch returned (graph replays only)
	phaseQueued          // every copy and launch of the pass is issued
	phaseSynced          // the stream is drained
	phaseBack            // Device.Do returned to the caller
	phaseEnd             // the results are in the steps
	nPhases
)

// stepTrace accumulates host timestamps of Forward's phases; a nil
// *stepTrace records nothing. Forward's goroutine and the device goroutine
// stamp it in turn (Device.Do orders them), under the model's lock.
type stepTrace struct {
	t      [nPhases]time.Time
	sum    [nPhases]time.Duration // from phaseEnter
	passes int
	sel    int // passes that selected tokens on the device
}

func (t *stepTrace) mark(ph int) {
	if t != nil {
		t.t[ph] = time.Now()
	}
}

func (t *stepTrace) done(sel bool) {
	if t == nil {
		return
	}
	for ph := phaseDo; ph < nPhases; ph++ {
		if !t.t[ph].IsZero() {
			t.sum[ph] += t.t[ph].Sub(t.t[phaseEnter])
		}
	}
	t.t = [nPhases]time.Time{}
	t.passes++
	if sel {
		t.sel++
	}
}

// phases returns the mean phase durations.
func (t *stepTrace) phases() HostPhases {
	if t.passes == 0 {
		return HostPhases{}
	}
	n := time.Duration(t.passes)
	at := func(ph int) time.Duration { return t.sum[ph] / n }
	h := HostPhases{
		ToDevice:   at(phaseDo),
		Enqueue:    at(phaseQueued) - at(phaseDo),
		Wait:       at(phaseSynced) - at(phaseQueued),
		FromDevice: at(phaseBack) - at(phaseSynced),
		Scatter:    at(phaseEnd) - at(phaseBack),
	}
	if t.sum[phaseLaunched] > 0 {
		h.Launch = at(phaseLaunched) - at(phaseDo)
	}
	return h
}

// setTrace installs (or, with nil, removes) the pass tracer.
func (m *Model) setTrace(t *stepTrace) {
	m.mu.Lock()
	m.fw.trace = t
	m.mu.Unlock()
}

// TimeDecode measures greedy decoding: Batch fresh sequences each take a
// prompt, then Warmup and Steps decode passes advance all of them by one
// token, each fed its own greedy choice — selected on the device with
// Greedy, else by the host from the downloaded logits (untimed); only the
// Steps passes are timed. The sequences are closed afterwards.
func (m *Model) TimeDecode(ctx context.Context, o DecodeOptions) (*DecodeTiming, error) {
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Prompt == 0 {
		o.Prompt = 16
	}
	if o.Warmup == 0 {
		o.Warmup = 2
	}
	if o.Steps == 0 {
		o.Steps = 8
	}
	switch {
	case o.Batch < 1 || o.Batch > m.MaxSeqs():
		return nil, fmt.Errorf("time decode: batch %d outside 1..%d", o.Batch, m.MaxSeqs())
	case o.Prompt < 1 || o.Warmup < 0 || o.Steps < 1:
		return nil, fmt.Errorf("time decode: prompt %d, warm-up %d, steps %d", o.Prompt, o.Warmup, o.Steps)
	case o.Prompt+o.Warmup+o.Steps > m.MaxContext():
		return nil, fmt.Errorf("time decode: %d positions needed, the model's slots hold %d", o.Prompt+o.Warmup+o.Steps, m.MaxContext())
	}
	defer m.restoreGraphs(m.setGraphs(!o.NoGraphs))
	batch := make([]Step, o.Batch)
	for i := range batch {
		s, err := m.NewSequence(0)
		if err != nil {
			return nil, fmt.Errorf("time decode: %w", err)
		}
		defer s.Close()
		batch[i] = Step{Seq: s, Tokens: measurePrompt(m.Config.Vocab, o.Prompt, i)}
	}
	res := &DecodeTiming{Batch: o.Batch, Steps: o.Steps}
	tr := &stepTrace{}
	defer m.setTrace(nil)
	var replays int
	var el time.Duration
	for i := -1; i < o.Warmup+o.Steps; i++ {
		if i == o.Warmup {
			replays = m.Stats().GraphReplays
			m.setTrace(tr)
		}
		t := time.Now()
		if err := m.Forward(ctx, batch); err != nil {
			return nil, fmt.Errorf("time decode: pass %d: %w", i+1, err)
		}
		if i >= o.Warmup {
			el += time.Since(t)
		}
		if i == -1 {
			res.PromptLogits = append([]float32(nil), batch[0].Logits[0]...)
		}
		for j := range batch {
			st := &batch[j]
			if i >= 0 && o.Greedy {
				st.Tokens = []int32{st.Token}
			} else {
				st.Tokens = []int32{measureGreedy(st.Logits[0])}
			}
			st.Greedy = o.Greedy
		}
	}
	m.setTrace(nil)
	res.Graph = m.Stats().GraphReplays-replays == o.Steps
	m.mu.Lock()
	res.GraphCopies = res.Graph && m.pass.graphCopies && m.fw.noGraphCopies == nil
	if m.fw.noGraphCopies != nil {
		res.CopiesNote = fmt.Sprintf("copies kept out of the decode graph: capturing them failed: %v", m.fw.noGraphCopies)
	}
	m.mu.Unlock()
	res.DeviceSelect = tr.sel == o.Steps
	res.Phases = tr.phases()
	res.PerPass = el / time.Duration(o.Steps)
	res.TokensPerSecond = float64(o.Batch) / res.PerPass.Seconds()
	return res, nil
}

// DeviceHandoff measures the mean wall time of an empty Device.Do: the
// round trip from a caller's goroutine to the goroutine locked to the
// device context's thread and back, which every Forward pays once.
func DeviceHandoff(dev *cudadrv.Device, iters int) (time.Duration, error) {
	if iters < 1 {
		return 0, fmt.Errorf("device hand-off: %d iterations", iters)
	}
	nop := func(*cudadrv.Ctx) error { return nil }
	if err := dev.Do(nop); err != nil {
		return 0, fmt.Errorf("device hand-off: %w", err)
	}
	t := time.Now()
	for range iters {
		if err := dev.Do(nop); err != nil {
			return 0, fmt.Errorf("device hand-off: %w", err)
		}
	}
	return time.Since(t) / time.Duration(iters), nil
}

// PrefillTiming is what TimePrefill measured.
type PrefillTiming struct {
	Tokens, Iters int
	// PerPass is the mean wall time of one prompt pass.
	PerPass time.Duration
	// TokensPerSecond is Tokens ÷ PerPass.
	TokensPerSecond float64
}

// TimePrefill measures prompt processing: a prompt of tokens ids into an
// empty sequence, once untimed (buffers grow, the GEMM warms up) and then
// iters times.
func (m *Model) TimePrefill(ctx context.Context, tokens, iters int) (*PrefillTiming, error) {
	if tokens < 1 || tokens > m.MaxContext() || iters < 1 {
		return nil, fmt.Errorf("time prefill: %d tokens (slots hold %d) x %d passes", tokens, m.MaxContext(), iters)
	}
	s, err := m.NewSequence(0)
	if err != nil {
		return nil, fmt.Errorf("time prefill: %w", err)
	}
	defer s.Close()
	prompt := measurePrompt(m.Config.Vocab, tokens, 1)
	var el time.Duration
	for i := 0; i <= iters; i++ {
		s.Reset()
		t := time.Now()
		if err := m.Forward(ctx, []Step{{Seq: s, Tokens: prompt}}); err != nil {
			return nil, fmt.Errorf("time prefill: %w", err)
		}
		if i > 0 {
			el += time.Since(t)
		}
	}
	per := el / time.Duration(iters)
	return &PrefillTiming{Tokens: tokens, Iters: iters, PerPass: per, TokensPerSecond: float64(tokens) / per.Seconds()}, nil
}

// StepProfile is where the time of one batch-1 decode step goes on the
// device and on the host.
type StepProfile struct {
	// Kernels is the number of kernel launches in the step (the captured
	// graph's nodes).
	Kernels int
	// Device is the device time of one graph replay of the step's kernels
	// (captured without the copies graphCopies puts into Forward's
	// graphs), with no host gaps between them.
	Device time.Duration
	// GEMV is the device time of the step's matrix-vector products alone
	// (every layer's matrices and the output projection, launched as the
	// step launches them — q/k/v and gate/up fused where the pass fuses
	// them — and replayed from a graph); WeightBytes is what they read, so
	// WeightBytes ÷ GEMV is their effective bandwidth.
	GEMV        time.Duration
	WeightBytes int64
	// GEMVReadOnly is GEMV's launch sequence with every GEMV launch
	// replaced by one that only reads its matrices
	// (kernels.SetGEMVReadOnly; down's x quantization still runs): the
	// ceiling of that sequence on this device, launch gaps and ramps
	// included. Zero where the step's GEMVs are not the integer ones.
	GEMVReadOnly time.Duration
	// GEMVKinds splits GEMV by kind: each kind's launches for every layer
	// (the output projection alone), back to back in a graph of their own.
	GEMVKinds []GEMVKindProfile
	// DownHeld is the down chain (GEMVKinds' "down") with each product's
	// x already quantized: down's time without its x launch, which the
	// difference to the kind's Time is. Zero where not measured; DownHeldErr
	// says why where the measurement failed (it never fails the profile).
	DownHeld    time.Duration
	DownHeldErr error
	// DownSliced counts the layers whose down product the step takes by
	// column slices (kernels.GEMVSliced, which quantize their own x): for
	// those DownHeld times the one-vector kernels the slices replaced, on
	// the held x.
	DownSliced int
	// DeviceSerial and GEMVSerial are Device and GEMV with programmatic
	// dependent launch off (kernels.Tuning.Overlap): every kernel waits for its
	// predecessor to complete before it launches. Zero where the device
	// has no such launches (below compute capability 9.0).
	DeviceSerial, GEMVSerial time.Duration
	// HostEnqueue is the host time to enqueue the step kernel by kernel;
	// HostGraphLaunch the host time of one graph launch. The stream is
	// drained between samples, so neither waits for a full queue.
	HostEnqueue, HostGraphLaunch time.Duration
}

// GEMVKindProfile is the device time of one kind of matrix product over a
// decode step (Name: "q/k/v", "o", "gate/up", "down", "output").
type GEMVKindProfile struct {
	Name     string
	Bytes    int64
	Launches int
	Time     time.Duration
	// ReadOnly is the same chain with each integer GEMV launch replaced by
	// read_xor over its matrices (GEMVReadOnly's ceiling for this kind
	// alone; zero where it was not measured).
	ReadOnly time.Duration
}

// ProfileDecodeStep profiles a batch-1 decode step of a resident model
// (streamed layers rule out graph replay): it runs a 16-token prompt and
// one decode step on a fresh sequence, so the step's graph is captured and
// its inputs are on the device, then times iters replays of the graph, of
// the step's GEMVs alone, and of enqueueing the step kernel by kernel and
// launching the graph.
func (m *Model) ProfileDecodeStep(ctx context.Context, iters int) (*StepProfile, error) {
	if m.tb != nil {
		return nil, errors.New("profile decode step: the model streams layers, and only a resident model replays decode graphs")
	}
	if iters < 1 {
		return nil, fmt.Errorf("profile decode step: %d iterations", iters)
	}
	defer m.restoreGraphs(m.setGraphs(true))
	s, err := m.NewSequence(0)
	if err != nil {
		return nil, fmt.Errorf("profile decode step: %w", err)
	}
	defer s.Close()
	batch := []Step{{Seq: s, Tokens: measurePrompt(m.Config.Vocab, 16, 0)}}
	for range 2 {
		if err := m.Forward(ctx, batch); err != nil {
			return nil, fmt.Errorf("profile decode step: %w", err)
		}
		batch[0].Tokens = []int32{measureGreedy(batch[0].Logits[0])}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("profile decode step: model closed")
	}
	// The step just run: one token at position pos, whose ids, position
	// and slot are still in the meta buffer the graph reads.
	pos := s.pos - 1
	p := pass{T: 1, R: 1, decode: true, maxPos: pos,
		attn: []attnRun{{t0: 0, n: 1, span: pos + 1}}, out: []outRun{{t0: 0, n: 1}}}
	key := graphKey{n: 1, span: spanBucket(pos+1, m.maxCtx)}
	if _, ok := m.graphs[key]; !ok {
		return nil, fmt.Errorf("profile decode step: no decode graph was captured for %+v", key)
	}
	kinds := []struct {
		name  string
		kind  gemvKind
		bytes func(l *layerW) int64
	}{
		{"q/k/v", gemvQKV, func(l *layerW) int64 { return l.q.Bytes() + l.k.Bytes() + l.v.Bytes() }},
		{"o", gemvO, func(l *layerW) int64 { return l.o.Bytes() }},
		{"gate/up", gemvGateUp, func(l *layerW) int64 { return l.gate.Bytes() + l.up.Bytes() }},
		{"down", gemvDown, func(l *layerW) int64 { return l.down.Bytes() }},
		{"output", gemvOutput, nil},
	}
	// Each kind's bytes and launches; every matrix of the step is in one
	// kind, so WeightBytes is their sum.
	prof := &StepProfile{}
	for _, kd := range kinds {
		kp := GEMVKindProfile{Name: kd.name, Launches: len(m.layers)}
		if kd.bytes == nil {
			kp.Bytes, kp.Launches = m.output.Bytes(), 1
		} else {
			for i := range m.layers {
				kp.Bytes += kd.bytes(&m.layers[i])
			}
		}
		prof.WeightBytes += kp.Bytes
		prof.GEMVKinds = append(prof.GEMVKinds, kp)
	}
	err = m.dev.Do(func(c *cudadrv.Ctx) (err error) {
		defer func() {
			if rerr := m.resetFixed(c); err == nil {
				err = rerr
			}
		}()
		st := m.stream
		stepTime := func(gr *decodeGraph) (time.Duration, error) {
			return measureEvents(c, st, iters, func() error { return c.GraphLaunch(gr.exec, st) })
		}
		// Matrix products alone, launched as the step launches them
		// (enqueueGEMVs: fused where the pass fuses) and replayed from a
		// graph of their own: launched one by one, the small ones would
		// time the host's launch rate rather than the device.
		gemvTime := func(kinds gemvKind) (time.Duration, error) {
			if err := c.BeginCapture(st, cudadrv.CaptureThreadLocal); err != nil {
				return 0, err
			}
			cerr := m.enqueueGEMVs(c, kinds)
			mg, err := c.EndCapture(st)
			if cerr != nil {
				err = cerr
			}
			if err != nil {
				if mg != 0 {
					c.DestroyGraph(mg)
				}
				return 0, err
			}
			defer c.DestroyGraph(mg)
			mexec, err := c.Instantiate(mg)
			if err != nil {
				return 0, err
			}
			defer c.DestroyGraphExec(mexec)
			return measureEvents(c, st, iters, func() error { return c.GraphLaunch(mexec, st) })
		}
		// The step's kernels alone, captured as Forward captures them but
		// without the upload and download graphCopies adds: Device is the
		// kernels' time, comparable whatever the copies' placement. The
		// host's launch timings below replay the same graph.
		gr, err := m.capture(c, &p, key.span, false)
		if err != nil {
			return err
		}
		defer c.DestroyGraphExec(gr.exec)
		prof.Kernels = gr.nodes
		if prof.Device, err = stepTime(gr); err != nil {
			return err
		}
		if prof.GEMV, err = gemvTime(gemvAll); err != nil {
			return err
		}
		for i, kd := range kinds {
			if prof.GEMVKinds[i].Time, err = gemvTime(kd.kind); err != nil {
				return err
			}
		}
		if m.k.Tuning().IntegerGEMV {
			sink, err := c.Alloc(4 * int64(m.k.ReadXORBlocks()))
			if err != nil {
				return err
			}
			m.k.SetGEMVReadOnly(sink)
			prof.GEMVReadOnly, err = gemvTime(gemvAll)
			for i := 0; err == nil && i < len(kinds); i++ {
				prof.GEMVKinds[i].ReadOnly, err = gemvTime(kinds[i].kind)
			}
			m.k.SetGEMVReadOnly(0)
			if ferr := c.Free(sink); err == nil {
				err = ferr
			}
			if err != nil {
				return err
			}
		}
		for i := range m.layers {
			if m.downSliced(&m.layers[i], 1) {
				prof.DownSliced++
			}
		}
		if m.k.Tuning().IntegerGEMV && len(m.layers) > 0 {
			// Quantize the down products' x once (the first layer's
			// product, outside any graph): the scratch then holds it, and
			// the chain below declares it held before each product.
			lw := &m.layers[0]
			if err := m.k.GEMV(c, st, lw.down, m.act.gate, m.act.tmp, 1); err != nil {
				prof.DownHeldErr = err
			} else {
				prof.DownHeld, prof.DownHeldErr = gemvTime(gemvDown | gemvDownHeld)
			}
		}
		if maj, _ := m.dev.ComputeCapability(); maj >= 9 && cudadrv.CanOverlap() && m.k.Tuning().Overlap {
			k := m.k
			serialTuning := k.Tuning()
			serialTuning.Overlap = false
			m.k = k.WithTuning(serialTuning)
			defer func() { m.k = k }()
			serial, err := m.capture(c, &p, key.span, false)
			if err != nil {
				return err
			}
			prof.DeviceSerial, err = stepTime(serial)
			c.DestroyGraphExec(serial.exec)
			if err != nil {
				return err
			}
			if prof.GEMVSerial, err = gemvTime(gemvAll); err != nil {
				return err
			}
			m.k = k
		}
		var direct, graph time.Duration
		for range iters {
			t := time.Now()
			if err := m.enqueue(nil, c, &p); err != nil {
				return err
			}
			direct += time.Since(t)
			if err := c.StreamSync(st); err != nil {
				return err
			}
			t = time.Now()
			if err := c.GraphLaunch(gr.exec, st); err != nil {
				return err
			}
			graph += time.Since(t)
			if err := c.StreamSync(st); err != nil {
				return err
			}
		}
		prof.HostEnqueue = direct / time.Duration(iters)
		prof.HostGraphLaunch = graph / time.Duration(iters)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("profile decode step: %w", err)
	}
	return prof, nil
}
