package gpu

import (
	"fmt"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// graphKey identifies a captured decode step: the number of sequences,
// the span bucket its attention launches were sized for, and whether it
// ends by selecting greedy tokens (pass.sel).
type graphKey struct {
	n, span int
	sel     bool
}

// decodeGraph is an instantiated decode step.
type decodeGraph struct {
	exec  cudadrv.GraphExec
	nodes int
	// copies: the graph holds the meta upload and the result download
	// (passTuning.graphCopies); otherwise replayDecode issues them around the launch.
	copies bool
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
// it first when this batch size, span bucket and output kind are new, and
// issues the pass's copies (inside the graph where passTuning.graphCopies put them
// there). The graph reads token ids, positions and slots from the meta
// buffer the caller has just filled, so one graph serves every step of
// every set of n sequences.
func (m *Model) replayDecode(c *cudadrv.Ctx, p *pass) error {
	key := graphKey{p.T, spanBucket(p.maxPos+1, m.maxCtx), p.sel}
	g, ok := m.graphs[key]
	if !ok {
		copies := m.pass.graphCopies && m.fw.noGraphCopies == nil
		var err error
		g, err = m.capture(c, p, key.span, copies)
		if err != nil && copies {
			// Copies from pinned memory are capturable on every driver
			// we know; should one refuse, keep them out of the graph
			// rather than lose the graph.
			m.fw.noGraphCopies = err
			g, err = m.capture(c, p, key.span, false)
		}
		if err != nil {
			return fmt.Errorf("capturing decode step for %d sequences: %w", p.T, err)
		}
		m.graphs[key] = g
		m.stats.GraphCaptures++
		m.stats.GraphNodes = g.nodes
	}
	if !g.copies {
		if err := m.copyMeta(c, p); err != nil {
			return err
		}
	}
	if err := c.GraphLaunch(g.exec, m.stream); err != nil {
		return err
	}
	mark(m.fw.trace, TraceLaunched)
	if !g.copies {
		if err := m.copyOut(c, p); err != nil {
			return err
		}
	}
	m.stats.GraphReplays++
	return nil
}

// capture records one decode pass of the plan p, with attention sized for
// span keys (and its copies when copies is set), into an executable
// graph.
func (m *Model) capture(c *cudadrv.Ctx, p *pass, span int, copies bool) (*decodeGraph, error) {
	q := *p
	q.graphSpan = span
	// Should the model's tuning have turned the integer GEMVs on after Load, their
	// scratch must exist before capture (GEMVs never allocate).
	cfg := &m.Config
	if err := m.k.ReserveFastGEMV(c, m.stream, max(cfg.Dim, cfg.FFN, cfg.QDim())); err != nil {
		return nil, err
	}
	exec, nodes, err := c.Capture(m.stream, cudadrv.CaptureThreadLocal, func() error {
		if copies {
			if err := m.copyMeta(c, &q); err != nil {
				return err
			}
		}
		if err := m.enqueue(nil, c, &q); err != nil {
			return err
		}
		if copies {
			return m.copyOut(c, &q)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &decodeGraph{exec: exec, nodes: nodes, copies: copies}, nil
}

// dropGraphs destroys every captured graph (their launches hold buffer
// addresses that are about to change).
func (m *Model) dropGraphs(c *cudadrv.Ctx) {
	for k, g := range m.graphs {
		c.DestroyGraphExec(g.exec)
		delete(m.graphs, k)
	}
}
