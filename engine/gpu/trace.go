package gpu

// The trace hook: how a benchmark sees inside Forward without Forward
// measuring anything itself. Timing, averaging and reporting live with the
// benchmarks (internal/bench/gputime); Forward only tells an installed Tracer where
// a pass has got to. With no Tracer installed (production) each point costs
// one nil check: no clock read, no allocation, nothing recorded.

// TracePoint is a moment of a Forward pass at which work changes hands.
// A pass reaches them in this order (TraceLaunched only when the pass is
// replayed from a captured graph, TraceStarted and TraceLayers only when
// it is not).
type TracePoint uint8

const (
	// TraceEnter: Forward holds the model's lock and the batch is valid.
	TraceEnter TracePoint = iota
	// TraceDevice: the device goroutine (Device.Do) runs the pass.
	TraceDevice
	// TraceLaunched: the graph launch returned (graph replays only).
	TraceLaunched
	// TraceStarted: the pass's inputs are uploaded, its embedding issued
	// and, with streamed layers, the pipeline's pass begun: the first
	// layer is next.
	TraceStarted
	// TraceLayers: every layer is issued (and the CPU's FFNs, run on this
	// goroutine, are done): the output head is next.
	TraceLayers
	// TraceQueued: every copy and launch of the pass is issued.
	TraceQueued
	// TraceSynced: the stream is drained.
	TraceSynced
	// TraceBack: Device.Do returned to Forward's goroutine.
	TraceBack
	// TraceEnd: the results are in the steps.
	TraceEnd
	// NumTracePoints counts the points, for tracers that keep one slot
	// per point.
	NumTracePoints
)

// PassTrace describes a pass that finished without error.
type PassTrace struct {
	// Graph: the pass was replayed from a captured decode graph.
	Graph bool
	// GraphCopies: that graph also held the pass's upload and download.
	// CopiesErr says why not where capturing them failed (the model then
	// keeps every copy outside its graphs).
	GraphCopies bool
	CopiesErr   error
	// DeviceSelect: the pass selected its tokens on the device (every
	// step asked for Step.Greedy), so only token ids were downloaded.
	DeviceSelect bool
}

// Tracer receives the points of every Forward pass of the Model it is
// installed on (SetTracer). Forward's goroutine and the device goroutine
// call it in turn, never at once, under the model's lock; a Tracer must
// not call back into the Model. A failed pass stops at the point it
// reached: Done is called only for passes that finished.
type Tracer interface {
	Mark(TracePoint)
	Done(PassTrace)
}

// SetTracer installs t on the passes that follow (nil removes it). It is
// for benchmarks that split a pass's wall time; production leaves it unset.
func (m *Model) SetTracer(t Tracer) {
	m.mu.Lock()
	m.fw.trace = t
	m.mu.Unlock()
}

// SetNoGraphs switches the graph replay of decode passes off (or back on)
// for the passes after it, as Options.NoGraphs does at load, and returns
// the setting it replaced: a benchmark compares replayed and
// kernel-by-kernel passes on one loaded model, then restores it.
func (m *Model) SetNoGraphs(off bool) (was bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	was = m.opts.NoGraphs
	m.opts.NoGraphs = off
	return was
}

// mark tells t, when set, that the pass reached point p.
func mark(t Tracer, p TracePoint) {
	if t != nil {
		t.Mark(p)
	}
}

// passTrace describes the pass Forward just finished for its Tracer
// (called only when one is installed).
func (m *Model) passTrace(graph, sel bool) PassTrace {
	return PassTrace{
		Graph:        graph,
		GraphCopies:  graph && m.pass.graphCopies && m.fw.noGraphCopies == nil,
		CopiesErr:    m.fw.noGraphCopies,
		DeviceSelect: sel,
	}
}
