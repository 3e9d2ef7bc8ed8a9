package gputime

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// Prompt is a deterministic prompt of n ids in [1, vocab), different for
// each seed: every timing feeds the model the same input, so two models
// given the same options see the same tokens.
func Prompt(vocab, n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + (i*131+seed*17+7)%(vocab-1))
	}
	return p
}

// DecodeOptions say how TimeDecode runs. Zero fields take the defaults.
type DecodeOptions struct {
	// Batch is the number of sequences advanced per pass (default 1; at
	// most the model's MaxSeqs).
	Batch int
	// Prompt is each sequence's prompt length, run untimed first
	// (default 16).
	Prompt int
	// PromptSeed offsets the prompts' seeds: sequence i decodes from
	// Prompt(vocab, Prompt, PromptSeed+i). A caller that chose something
	// from one decode's behaviour (which experts to keep resident, from
	// its routing) times the choice on other tokens with another seed.
	PromptSeed int
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
	// BeforeTimed, when set, runs once just before the first timed pass,
	// outside the timed interval: a caller snapshots its counters there,
	// so their change when TimeDecode returns covers the timed passes
	// alone.
	BeforeTimed func()
}

func (o *DecodeOptions) fill() {
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
	// Setup is the part of Enqueue before the first layer (the inputs'
	// upload, the embedding, the streaming pipeline's begin), Head the
	// part after the last layer's (the output head and the download):
	// passes issued kernel by kernel only, 0 for graph replays. The rest
	// is the layers, with the CPU's FFNs where it takes some.
	Setup, Head time.Duration
	// Wait is from the pass enqueued to the stream drained: the device's
	// work, the latency of the device starting it and of the driver
	// noticing its end.
	Wait time.Duration
	// FromDevice is from the drained stream to Device.Do's return in the
	// caller (with streamed layers, also the slot bookkeeping).
	FromDevice time.Duration
	// Scatter is copying the logit rows into the steps (and choosing a
	// host greedy token where asked), or handing out the token ids.
	Scatter time.Duration
}

// phaseTrace is the gpu.Tracer TimeDecode installs for its timed passes:
// it stamps each point with the host clock and sums every point's offset
// from the pass's TraceEnter.
type phaseTrace struct {
	t      [gpu.NumTracePoints]time.Time
	sum    [gpu.NumTracePoints]time.Duration
	passes int
	sel    int // passes that selected tokens on the device
	graphs int // passes replayed from a graph
	copies int // of those, graphs that held their copies
	note   error
}

func (t *phaseTrace) Mark(p gpu.TracePoint) { t.t[p] = time.Now() }

func (t *phaseTrace) Done(p gpu.PassTrace) {
	for ph := gpu.TraceDevice; ph < gpu.NumTracePoints; ph++ {
		if !t.t[ph].IsZero() {
			t.sum[ph] += t.t[ph].Sub(t.t[gpu.TraceEnter])
		}
	}
	t.t = [gpu.NumTracePoints]time.Time{}
	t.passes++
	if p.DeviceSelect {
		t.sel++
	}
	if p.Graph {
		t.graphs++
	}
	if p.GraphCopies {
		t.copies++
	}
	if p.CopiesErr != nil {
		t.note = p.CopiesErr
	}
}

// phases returns the mean phase durations.
func (t *phaseTrace) phases() HostPhases {
	if t.passes == 0 {
		return HostPhases{}
	}
	n := time.Duration(t.passes)
	at := func(ph gpu.TracePoint) time.Duration { return t.sum[ph] / n }
	h := HostPhases{
		ToDevice:   at(gpu.TraceDevice),
		Enqueue:    at(gpu.TraceQueued) - at(gpu.TraceDevice),
		Wait:       at(gpu.TraceSynced) - at(gpu.TraceQueued),
		FromDevice: at(gpu.TraceBack) - at(gpu.TraceSynced),
		Scatter:    at(gpu.TraceEnd) - at(gpu.TraceBack),
	}
	if t.sum[gpu.TraceLaunched] > 0 {
		h.Launch = at(gpu.TraceLaunched) - at(gpu.TraceDevice)
	}
	if t.sum[gpu.TraceStarted] > 0 && t.sum[gpu.TraceLayers] > 0 {
		h.Setup = at(gpu.TraceStarted) - at(gpu.TraceDevice)
		h.Head = at(gpu.TraceQueued) - at(gpu.TraceLayers)
	}
	return h
}

// TimeDecode measures greedy decoding on m: Batch fresh sequences each
// take a prompt, then Warmup and Steps decode passes advance all of them
// by one token, each fed its own greedy choice — selected on the device
// with Greedy, else by the host from the downloaded logits (untimed);
// only the Steps passes are timed, with m's tracer installed for them
// alone. The sequences are closed and m's graph setting restored
// afterwards.
func TimeDecode(ctx context.Context, m *gpu.Model, o DecodeOptions) (*DecodeTiming, error) {
	o.fill()
	switch {
	case o.Batch < 1 || o.Batch > m.MaxSeqs():
		return nil, fmt.Errorf("time decode: batch %d outside 1..%d", o.Batch, m.MaxSeqs())
	case o.Prompt < 1 || o.Warmup < 0 || o.Steps < 1:
		return nil, fmt.Errorf("time decode: prompt %d, warm-up %d, steps %d", o.Prompt, o.Warmup, o.Steps)
	case o.Prompt+o.Warmup+o.Steps > m.MaxContext():
		return nil, fmt.Errorf("time decode: %d positions needed, the model's slots hold %d", o.Prompt+o.Warmup+o.Steps, m.MaxContext())
	}
	defer m.SetNoGraphs(m.SetNoGraphs(o.NoGraphs))
	batch := make([]model.Step, o.Batch)
	for i := range batch {
		s, err := m.NewSequence(0)
		if err != nil {
			return nil, fmt.Errorf("time decode: %w", err)
		}
		defer s.Close()
		batch[i] = model.Step{Seq: s, Tokens: Prompt(m.Config.Vocab, o.Prompt, o.PromptSeed+i)}
	}
	res := &DecodeTiming{Batch: o.Batch, Steps: o.Steps}
	tr := &phaseTrace{}
	defer m.SetTracer(nil)
	var el time.Duration
	for i := -1; i < o.Warmup+o.Steps; i++ {
		if i == o.Warmup {
			if o.BeforeTimed != nil {
				o.BeforeTimed()
			}
			m.SetTracer(tr)
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
				st.Tokens = []int32{sample.Argmax(st.Logits[0])}
			}
			st.Greedy = o.Greedy
		}
	}
	m.SetTracer(nil)
	res.Graph = tr.graphs == o.Steps
	res.GraphCopies = res.Graph && tr.copies == o.Steps
	if tr.note != nil {
		res.CopiesNote = fmt.Sprintf("copies kept out of the decode graph: capturing them failed: %v", tr.note)
	}
	res.DeviceSelect = tr.sel == o.Steps
	res.Phases = tr.phases()
	res.PerPass = el / time.Duration(o.Steps)
	res.TokensPerSecond = float64(o.Batch) / res.PerPass.Seconds()
	return res, nil
}

// PrefillTiming is what TimePrefill measured.
type PrefillTiming struct {
	Tokens, Iters int
	// PerPass is the mean wall time of one prompt pass.
	PerPass time.Duration
	// TokensPerSecond is Tokens ÷ PerPass.
	TokensPerSecond float64
}

// TimePrefill measures prompt processing on m: a prompt of tokens ids
// into an empty sequence, once untimed (buffers grow, the GEMM warms up)
// and then iters times.
func TimePrefill(ctx context.Context, m *gpu.Model, tokens, iters int) (*PrefillTiming, error) {
	if tokens < 1 || tokens > m.MaxContext() || iters < 1 {
		return nil, fmt.Errorf("time prefill: %d tokens (slots hold %d) x %d passes", tokens, m.MaxContext(), iters)
	}
	s, err := m.NewSequence(0)
	if err != nil {
		return nil, fmt.Errorf("time prefill: %w", err)
	}
	defer s.Close()
	prompt := Prompt(m.Config.Vocab, tokens, 1)
	var el time.Duration
	for i := 0; i <= iters; i++ {
		s.Reset()
		t := time.Now()
		if err := m.Forward(ctx, []model.Step{{Seq: s, Tokens: prompt}}); err != nil {
			return nil, fmt.Errorf("time prefill: %w", err)
		}
		if i > 0 {
			el += time.Since(t)
		}
	}
	per := el / time.Duration(iters)
	return &PrefillTiming{Tokens: tokens, Iters: iters, PerPass: per, TokensPerSecond: float64(tokens) / per.Seconds()}, nil
}
