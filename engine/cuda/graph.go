package cuda

import (
	"fmt"

	kcuda "github.com/strata-llm/strata/kernels/cuda"
)

// graphKey identifies a captured decode step: the number of sequences and
// the span bucket its attention launches were sized for.
type graphKey struct{ n, span int }

// decodeGraph is an instantiated decode step.
type decodeGraph struct {
	exec  kcuda.GraphExec
	nodes int
}

// minGraphSpan is the smallest span bucket: shorter contexts share one
// graph, whose attention launch is split for 256 keys.
const minGraphSpan = 256

// spanBucket rounds a needed key span up to a power of two (at least
// minGraphSpan, at most the slot capacity), so a sequence growing by one
// token a step needs a new graph only when it doubles.
func spanBucket(need, maxCtx int) int {
	b := minGraphSpan
	for b < need {
		b *= 2
	}
	return min(b, maxCtx)
}

// replayDecode runs a pure decode pass from its captured graph, capturing
// it first when this batch size and span bucket are new. The graph reads
// token ids, positions and slots from the meta buffer the caller has just
// filled, so one graph serves every step of every set of n sequences.
func (m *Model) replayDecode(c *kcuda.Ctx, p *pass) error {
	key := graphKey{p.T, spanBucket(p.maxPos+1, m.maxCtx)}
	g, ok := m.graphs[key]
	if !ok {
		var err error
		if g, err = m.capture(c, p, key.span); err != nil {
			return fmt.Errorf("capturing decode step for %d sequences: %w", p.T, err)
		}
		m.graphs[key] = g
		m.stats.GraphCaptures++
		m.stats.GraphNodes = g.nodes
	}
	if err := c.GraphLaunch(g.exec, m.stream); err != nil {
		return err
	}
	m.stats.GraphReplays++
	return nil
}

// capture records one decode pass of the plan p, with attention sized for
// span keys, into an executable graph.
func (m *Model) capture(c *kcuda.Ctx, p *pass, span int) (*decodeGraph, error) {
	q := *p
	q.graphSpan = span
	if err := c.BeginCapture(m.stream, kcuda.CaptureThreadLocal); err != nil {
		return nil, err
	}
	err := m.enqueue(nil, c, &q)
	g, eerr := c.EndCapture(m.stream)
	if err == nil {
		err = eerr
	}
	if err != nil {
		if g != 0 {
			c.DestroyGraph(g)
		}
		return nil, err
	}
	defer c.DestroyGraph(g)
	nodes, err := c.GraphNodes(g)
	if err != nil {
		return nil, err
	}
	exec, err := c.Instantiate(g)
	if err != nil {
		return nil, err
	}
	return &decodeGraph{exec: exec, nodes: nodes}, nil
}

// dropGraphs destroys every captured graph (their launches hold buffer
// addresses that are about to change).
func (m *Model) dropGraphs(c *kcuda.Ctx) {
	for k, g := range m.graphs {
		c.DestroyGraphExec(g.exec)
		delete(m.graphs, k)
	}
}
