package cudadrv

import (
	"fmt"
	"unsafe"
)

// Graph is a captured CUgraph; GraphExec its instantiated, launchable form.
type (
	Graph     uintptr
	GraphExec uintptr
)

// Stream capture modes (CUstreamCaptureMode).
const (
	CaptureGlobal      = 0
	CaptureThreadLocal = 1
	CaptureRelaxed     = 2
)

// BeginCapture starts recording the work enqueued on s (which must not be
// the default stream) into a graph instead of running it.
func (c *Ctx) BeginCapture(s Stream, mode int) error {
	return check("cuStreamBeginCapture", call(drv.cuStreamBeginCapture, uintptr(s), uintptr(mode)))
}

// EndCapture stops recording on s and returns the graph.
func (c *Ctx) EndCapture(s Stream) (Graph, error) {
	var g uintptr
	if err := check("cuStreamEndCapture", call(drv.cuStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))); err != nil {
		return 0, err
	}
	return Graph(g), nil
}

// GraphNodes reports how many nodes g has (one per captured launch, copy
// or memset).
func (c *Ctx) GraphNodes(g Graph) (int, error) {
	var n uint64
	if err := check("cuGraphGetNodes", call(drv.cuGraphGetNodes, uintptr(g), 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Instantiate turns a graph into an executable graph.
func (c *Ctx) Instantiate(g Graph) (GraphExec, error) {
	var e uintptr
	if err := check("cuGraphInstantiate", call(drv.cuGraphInstantiate, uintptr(unsafe.Pointer(&e)), uintptr(g), 0)); err != nil {
		return 0, fmt.Errorf("instantiating graph: %w", err)
	}
	return GraphExec(e), nil
}

// GraphLaunch replays an executable graph on s.
func (c *Ctx) GraphLaunch(e GraphExec, s Stream) error {
	return check("cuGraphLaunch", call(drv.cuGraphLaunch, uintptr(e), uintptr(s)))
}

// DestroyGraph releases g (an instantiated GraphExec stays valid).
func (c *Ctx) DestroyGraph(g Graph) error {
	if g == 0 {
		return nil
	}
	return check("cuGraphDestroy", call(drv.cuGraphDestroy, uintptr(g)))
}

// DestroyGraphExec releases e.
func (c *Ctx) DestroyGraphExec(e GraphExec) error {
	if e == 0 {
		return nil
	}
	return check("cuGraphExecDestroy", call(drv.cuGraphExecDestroy, uintptr(e)))
}

// Capture records what fn enqueues on s (capture mode as BeginCapture
// takes) and returns it instantiated, with the number of nodes the graph
// holds. The capture always ends, so s is usable again whatever fn
// returned; the intermediate graph is destroyed either way.
func (c *Ctx) Capture(s Stream, mode int, fn func() error) (exec GraphExec, nodes int, err error) {
	if err := c.BeginCapture(s, mode); err != nil {
		return 0, 0, err
	}
	ferr := fn()
	g, err := c.EndCapture(s)
	if ferr != nil {
		err = ferr
	}
	if g != 0 {
		defer c.DestroyGraph(g)
	}
	if err != nil {
		return 0, 0, err
	}
	if nodes, err = c.GraphNodes(g); err != nil {
		return 0, 0, err
	}
	if exec, err = c.Instantiate(g); err != nil {
		return 0, 0, err
	}
	return exec, nodes, nil
}
