package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// The probe: a resident model's decode step taken apart for a benchmark.
// Only this package can capture the step's kernels, or its matrix products
// alone, into graphs; what the benchmark does with them (how often it
// launches them, how it times them) lives with the benchmark
// (internal/bench/gputime's ProfileDecodeStep). Nothing here runs on a Forward.

// GEMVSet selects kinds of a decode step's matrix products.
type GEMVSet uint8

const (
	GEMVQKV GEMVSet = 1 << iota
	GEMVO
	GEMVGateUp
	GEMVDown
	GEMVOutput
	AllGEMVs = GEMVQKV | GEMVO | GEMVGateUp | GEMVDown | GEMVOutput
)

// kinds maps the set onto the selector enqueueGEMVs takes.
func (s GEMVSet) kinds() gemvKind {
	var k gemvKind
	for _, m := range []struct {
		s GEMVSet
		k gemvKind
	}{{GEMVQKV, gemvQKV}, {GEMVO, gemvO}, {GEMVGateUp, gemvGateUp}, {GEMVDown, gemvDown}, {GEMVOutput, gemvOutput}} {
		if s&m.s != 0 {
			k |= m.k
		}
	}
	return k
}

// GEMVKind is one kind of a decode step's matrix products: every layer's
// (the output projection alone), the bytes they read and their launches.
type GEMVKind struct {
	Set      GEMVSet
	Name     string // "q/k/v", "o", "gate/up", "down", "output"
	Bytes    int64
	Launches int
}

// Capture says what StepProbe.Capture records.
type Capture struct {
	// GEMVs, when not zero, records only the step's matrix products of
	// these kinds, launched as the step launches them (fused where the
	// pass fuses them, x arriving quantized where the step's norm or
	// attention leaves it so); zero records the whole step's kernels,
	// without the upload and download Forward's graphs may hold.
	GEMVs GEMVSet
	// Select (whole step only) ends the step with the device's arg max,
	// as a pass whose steps all ask for Step.Greedy does.
	Select bool
	// ReadOnly (GEMVs only) replaces every integer GEMV launch by one that
	// only reads the same matrices (kernels.SetGEMVReadOnly): the launch
	// sequence's read-only ceiling. Needs IntegerGEMVs.
	ReadOnly bool
	// HeldDownX (with GEMVDown) launches each down product with its x
	// declared already quantized: the chain without down's x launch. The
	// probe quantizes that x once first, outside the graph; layers that
	// take down by column slices run the one-vector kernels instead.
	HeldDownX bool
	// Serial records with programmatic dependent launch off: every kernel
	// waits for its predecessor to complete. Needs Overlapped.
	Serial bool
}

// StepGraph is a captured piece of the probed step, replayable on the
// probe's stream until ProbeDecodeStep returns.
type StepGraph struct {
	c    *cudadrv.Ctx
	s    cudadrv.Stream
	exec cudadrv.GraphExec
	// Nodes is the graph's node count: one per kernel launch.
	Nodes int
}

// Launch enqueues one replay of the graph on the probe's stream.
func (g *StepGraph) Launch() error { return g.c.GraphLaunch(g.exec, g.s) }

// Close destroys the graph.
func (g *StepGraph) Close() error { return g.c.DestroyGraphExec(g.exec) }

// StepProbe is a resident model's batch-1 decode step held for a
// benchmark: the token, position and slot of the step just run are still
// in the buffers its kernels read, so each piece Capture records computes
// what the step computed (GEMV-only pieces excepted: their values are
// meaningless). It is valid only inside the function given to
// ProbeDecodeStep, which runs on the device goroutine with the model
// locked; Ctx and Stream are for the caller's own events and syncs.
type StepProbe struct {
	m    *Model
	c    *cudadrv.Ctx
	p    pass
	span int
	sink cudadrv.DevPtr // read_xor's words, allocated on the first ReadOnly capture
}

// ProbeDecodeStep runs prompt and then one decode step (the greedy
// token, chosen on the host) on a fresh sequence of a resident model, so
// the step's decode graph is captured and its inputs are on the device,
// and then calls fn with the step held. The model's graph setting is
// restored afterwards, the sequence closed, and the fixed-point
// accumulators the GEMV-only pieces leave holding sums are zeroed before
// the next Forward. Streamed layers rule it out: only a resident model
// replays decode graphs.
func (m *Model) ProbeDecodeStep(ctx context.Context, prompt []int32, fn func(*StepProbe) error) error {
	if m.tb != nil {
		return errors.New("probe decode step: the model streams layers, and only a resident model replays decode graphs")
	}
	if len(prompt) == 0 {
		return errors.New("probe decode step: empty prompt")
	}
	defer m.SetNoGraphs(m.SetNoGraphs(false))
	s, err := m.NewSequence(0)
	if err != nil {
		return fmt.Errorf("probe decode step: %w", err)
	}
	defer s.Close()
	batch := []model.Step{{Seq: s, Tokens: prompt}}
	for range 2 {
		if err := m.Forward(ctx, batch); err != nil {
			return fmt.Errorf("probe decode step: %w", err)
		}
		batch[0].Tokens = []int32{sample.Argmax(batch[0].Logits[0])}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("probe decode step: model closed")
	}
	pos := s.pos - 1
	pr := &StepProbe{m: m, p: pass{T: 1, R: 1, decode: true, maxPos: pos,
		attn: []attnRun{{t0: 0, n: 1, span: pos + 1}}, out: []outRun{{t0: 0, n: 1}}},
		span: spanBucket(pos+1, m.maxCtx)}
	if _, ok := m.graphs[graphKey{n: 1, span: pr.span}]; !ok {
		return fmt.Errorf("probe decode step: no decode graph was captured for one sequence, span %d", pr.span)
	}
	err = m.dev.Do(func(c *cudadrv.Ctx) (err error) {
		pr.c = c
		defer func() {
			if pr.sink != 0 {
				keepFirst(&err, func() error { return c.Free(pr.sink) })
			}
			keepFirst(&err, func() error { return m.resetFixed(c) })
		}()
		return fn(pr)
	})
	if err != nil {
		return fmt.Errorf("probe decode step: %w", err)
	}
	return nil
}

// Ctx is the device context the probe runs in.
func (p *StepProbe) Ctx() *cudadrv.Ctx { return p.c }

// Stream is the model's stream, which every captured piece replays on.
func (p *StepProbe) Stream() cudadrv.Stream { return p.m.stream }

// Kinds lists the step's kinds of matrix products in launch order; every
// matrix of the step is in one kind.
func (p *StepProbe) Kinds() []GEMVKind {
	m := p.m
	kinds := []struct {
		set   GEMVSet
		name  string
		bytes func(l *layerW) int64
	}{
		{GEMVQKV, "q/k/v", func(l *layerW) int64 { return l.q.Bytes() + l.k.Bytes() + l.v.Bytes() }},
		{GEMVO, "o", func(l *layerW) int64 { return l.o.Bytes() }},
		{GEMVGateUp, "gate/up", func(l *layerW) int64 { return l.gate.Bytes() + l.up.Bytes() }},
		{GEMVDown, "down", func(l *layerW) int64 { return l.down.Bytes() }},
		{GEMVOutput, "output", nil},
	}
	var out []GEMVKind
	for _, kd := range kinds {
		k := GEMVKind{Set: kd.set, Name: kd.name, Launches: len(m.layers)}
		if kd.bytes == nil {
			k.Bytes, k.Launches = m.output.Bytes(), 1
		} else {
			for i := range m.layers {
				k.Bytes += kd.bytes(&m.layers[i])
			}
		}
		out = append(out, k)
	}
	return out
}

// DownSliced counts the layers whose down product the step takes by
// column slices (kernels.GEMVSliced, which quantize their own x).
func (p *StepProbe) DownSliced() int {
	n := 0
	for i := range p.m.layers {
		if p.m.downSliced(&p.m.layers[i], 1) {
			n++
		}
	}
	return n
}

// IntegerGEMVs reports whether the step's quantized GEMVs run on the
// integer path, the one Capture.ReadOnly can stand in for.
func (p *StepProbe) IntegerGEMVs() bool { return p.m.k.Tuning().IntegerGEMV }

// Overlapped reports whether the step's kernels launch with programmatic
// dependent launch, so that Capture.Serial has something to turn off.
func (p *StepProbe) Overlapped() bool {
	maj, _ := p.m.dev.ComputeCapability()
	return maj >= 9 && cudadrv.CanOverlap() && p.m.k.Tuning().Overlap
}

// Enqueue issues the whole step kernel by kernel on the stream (without
// its copies), as a pass that replays no graph does.
func (p *StepProbe) Enqueue() error { return p.m.enqueue(nil, p.c, &p.p) }

// Capture records the piece o describes into a graph.
func (p *StepProbe) Capture(o Capture) (*StepGraph, error) {
	m, c := p.m, p.c
	if o.Serial {
		if !p.Overlapped() {
			return nil, errors.New("capture: the step's launches do not overlap, so there is no serial variant")
		}
		// The probe's own view of the kernels with programmatic dependent
		// launch off, for this capture only.
		k := m.k
		serial := k.Tuning()
		serial.Overlap = false
		m.k = k.WithTuning(serial)
		defer func() { m.k = k }()
	}
	if o.GEMVs == 0 {
		if o.ReadOnly || o.HeldDownX {
			return nil, errors.New("capture: read-only and held-x variants are of GEMV pieces only")
		}
		q := p.p
		q.sel = o.Select
		g, err := m.capture(c, &q, p.span, false)
		if err != nil {
			return nil, err
		}
		return &StepGraph{c: c, s: m.stream, exec: g.exec, Nodes: g.nodes}, nil
	}
	if o.Select {
		return nil, errors.New("capture: the device's arg max ends a whole step, not a GEMV piece")
	}
	kinds := o.GEMVs.kinds()
	if o.HeldDownX {
		if o.GEMVs&GEMVDown == 0 || len(m.layers) == 0 {
			return nil, errors.New("capture: a held x is down's")
		}
		// Quantize down's x once, outside any graph: the scratch then
		// holds it, and the chain declares it held before each product.
		lw := &m.layers[0]
		if err := m.k.GEMV(c, m.stream, lw.down, m.act.gate, m.act.tmp, 1); err != nil {
			return nil, err
		}
		kinds |= gemvDownHeld
	}
	if o.ReadOnly {
		if !p.IntegerGEMVs() {
			return nil, errors.New("capture: a read-only ceiling stands in for the integer GEMVs only")
		}
		if p.sink == 0 {
			sink, err := c.Alloc(4 * int64(m.k.ReadXORBlocks()))
			if err != nil {
				return nil, err
			}
			p.sink = sink
		}
		m.k.SetGEMVReadOnly(p.sink)
		defer m.k.SetGEMVReadOnly(0)
	}
	st := m.stream
	exec, nodes, err := c.Capture(st, cudadrv.CaptureThreadLocal, func() error { return m.enqueueGEMVs(c, kinds) })
	if err != nil {
		return nil, err
	}
	return &StepGraph{c: c, s: st, exec: exec, Nodes: nodes}, nil
}
