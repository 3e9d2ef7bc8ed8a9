package gpu

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine/model"
)

// recorder is a Tracer that keeps what it is told.
type recorder struct {
	points []TracePoint
	passes []PassTrace
}

func (r *recorder) Mark(p TracePoint) { r.points = append(r.points, p) }
func (r *recorder) Done(p PassTrace)  { r.passes = append(r.passes, p) }

// TestTraceUnset: with no Tracer a trace point is a nil check, nothing
// more. (Not parallel: AllocsPerRun refuses parallel tests.)
func TestTraceUnset(t *testing.T) {
	var tr Tracer
	if n := testing.AllocsPerRun(100, func() {
		for p := range NumTracePoints {
			mark(tr, p)
		}
	}); n != 0 {
		t.Errorf("%v allocations a pass without a tracer", n)
	}
	r := &recorder{}
	mark(r, TraceSynced)
	if !slices.Equal(r.points, []TracePoint{TraceSynced}) {
		t.Errorf("points %v", r.points)
	}
}

// TestTracer: an installed Tracer is told every point of a pass in order
// (the graph launch only on a replay) and what kind of pass it was; once
// removed, it is told nothing.
func TestTracer(t *testing.T) {
	gpu(t)
	cpu := tinyModel(t, "llama", "q4_k_m")
	g := loadGPU(t, cpu, Options{MaxSeqs: 1, MaxContext: 64})
	ctx := context.Background()
	s, err := g.NewSequence(0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &recorder{}
	g.SetTracer(r)
	all := []TracePoint{TraceEnter, TraceDevice, TraceLaunched, TraceQueued, TraceSynced, TraceBack, TraceEnd}
	direct := []TracePoint{TraceEnter, TraceDevice, TraceStarted, TraceLayers, TraceQueued, TraceSynced, TraceBack, TraceEnd}
	for i, c := range []struct {
		name     string
		tokens   []int32
		greedy   bool
		noGraphs bool
		points   []TracePoint
		pass     PassTrace
	}{
		{name: "prompt", tokens: promptTokens(cpu.Config.Vocab, 8, 1), points: direct},
		{name: "decode, graph", tokens: []int32{3}, points: all, pass: PassTrace{Graph: true, GraphCopies: g.pass.graphCopies}},
		{name: "decode, graph, greedy", tokens: []int32{4}, greedy: true, points: all, pass: PassTrace{Graph: true, GraphCopies: g.pass.graphCopies, DeviceSelect: true}},
		{name: "decode, no graph", tokens: []int32{5}, noGraphs: true, points: direct},
	} {
		r.points, r.passes = nil, nil
		was := g.SetNoGraphs(c.noGraphs)
		err := g.Forward(ctx, []model.Step{{Seq: s, Tokens: c.tokens, Greedy: c.greedy}})
		g.SetNoGraphs(was)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(r.points, c.points) || len(r.passes) != 1 || r.passes[0] != c.pass {
			t.Errorf("pass %d (%s): points %v, passes %+v; want %v, %+v", i, c.name, r.points, r.passes, c.points, c.pass)
		}
	}
	g.SetTracer(nil)
	r.points, r.passes = nil, nil
	if err := g.Forward(ctx, []model.Step{{Seq: s, Tokens: []int32{6}}}); err != nil {
		t.Fatal(err)
	}
	if len(r.points)+len(r.passes) != 0 {
		t.Errorf("a removed tracer was told %v, %v", r.points, r.passes)
	}
}
