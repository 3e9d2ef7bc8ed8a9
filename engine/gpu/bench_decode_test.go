package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// BenchmarkDecodeHost measures where a resident 8b decode step's time
// beyond the device's goes (STRATA_8B_GGUF; run with -test.benchtime 1x):
// the empty Device.Do round trip, the step's kernels alone (device time of
// a graph replay), and, for each combination of the result (greedy token
// selected on the device, or the logits row downloaded), the copies'
// place (inside the decode graph or around it) and the wait
// (cuStreamSynchronize or polling cuStreamQuery), and the Device.Do
// hand-offs (sleeping, or spinning: Device.SetSpin), the decode rate and the
// host phases of TimeDecode. The sweep runs twice, so run-to-run noise
// shows next to the differences.
func BenchmarkDecodeHost(b *testing.B) {
	const spinFor = 20 * time.Millisecond // longer than a step: Do's caller never sleeps
	cpu, dev := openBig(b, "STRATA_8B_GGUF", "8b")
	g := loadGPU(b, cpu, Options{MaxSeqs: 1, MaxContext: 1024})
	ctx := context.Background()

	hand, err := DeviceHandoff(dev, 2000)
	if err != nil {
		b.Fatal(err)
	}
	dev.SetSpin(spinFor)
	handSpin, err := DeviceHandoff(dev, 2000)
	dev.SetSpin(0)
	if err != nil {
		b.Fatal(err)
	}
	prof, err := g.ProfileDecodeStep(ctx, 50)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("empty Device.Do round trip %.1f us (%.1f us spinning); decode step kernels alone %.3f ms (%d kernels, graph); host graph launch %.1f us",
		us(hand), us(handSpin), ms(prof.Device), prof.Kernels, us(prof.HostGraphLaunch))

	// The device cost of selecting on the device: the step's kernels
	// alone, captured without and with the final arg max.
	var kern [2]time.Duration
	for i, sel := range []bool{false, true} {
		const pos = 16 // ProfileDecodeStep's last step, still in the meta buffer
		p := pass{T: 1, R: 1, decode: true, sel: sel, maxPos: pos,
			attn: []attnRun{{t0: 0, n: 1, span: pos + 1}}, out: []outRun{{t0: 0, n: 1}}}
		err := g.dev.Do(func(c *cudadrv.Ctx) error {
			gr, err := g.capture(c, &p, spanBucket(pos+1, g.maxCtx), false)
			if err != nil {
				return err
			}
			defer c.DestroyGraphExec(gr.exec)
			kern[i], err = measureEvents(c, g.stream, 100, func() error { return c.GraphLaunch(gr.exec, g.stream) })
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("decode step kernels: %.1f us, with the device arg max %.1f us (+%.1f us)", us(kern[0]), us(kern[1]), us(kern[1]-kern[0]))

	defer func(p passTuning) { g.pass = p }(g.pass)
	defer dev.SetSpin(0)
	type variant struct {
		greedy, copies, spin bool
	}
	name := func(v variant) string {
		s := "logits row"
		if v.greedy {
			s = "greedy on device"
		}
		if v.copies {
			s += ", copies in graph"
		} else {
			s += ", copies outside"
		}
		if v.spin {
			s += ", spin hand-off"
		}
		return s
	}
	variants := []variant{
		{true, true, false}, {false, true, false}, // the defaults
		{true, false, false}, {false, false, false}, // copies outside the graph
		{true, true, true}, {false, true, true}, // spinning Device.Do hand-offs
	}
	best := map[variant]float64{}
	for round := range 2 {
		for _, v := range variants {
			g.pass.graphCopies = v.copies
			if v.spin {
				dev.SetSpin(spinFor)
			} else {
				dev.SetSpin(0)
			}
			if err := g.dev.Do(func(c *cudadrv.Ctx) error { g.dropGraphs(c); return nil }); err != nil {
				b.Fatal(err)
			}
			r, err := g.TimeDecode(ctx, DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 256, Greedy: v.greedy})
			if err != nil {
				b.Fatalf("%s: %v", name(v), err)
			}
			if !r.Graph || r.DeviceSelect != v.greedy || r.GraphCopies != v.copies {
				b.Errorf("%s: graph %v, device select %v, copies in graph %v (%s)", name(v), r.Graph, r.DeviceSelect, r.GraphCopies, r.CopiesNote)
			}
			h := r.Phases
			b.Logf("[round %d] %-58s %.1f tok/s (%.3f ms/step, %.3fx llama.cpp); wall - kernels %.1f us = to device %.1f + enqueue %.1f (launch returned at %.1f) + wait %.1f (- kernels %.1f) + back %.1f + scatter %.1f",
				round, name(v), r.TokensPerSecond, ms(r.PerPass), r.TokensPerSecond/peerDecode, us(r.PerPass-prof.Device),
				us(h.ToDevice), us(h.Enqueue), us(h.Launch), us(h.Wait), us(h.Wait-prof.Device), us(h.FromDevice), us(h.Scatter))
			best[v] = max(best[v], r.TokensPerSecond)
		}
	}
	dev.SetSpin(0)
	g.pass = defaultPassTuning
	b.ReportMetric(best[variant{true, true, false}], "greedy-tok/s")
	b.ReportMetric(best[variant{false, true, false}], "logits-tok/s")
	b.ReportMetric(best[variant{true, true, true}], "greedy-spin-tok/s")
	b.ReportMetric(us(hand), "us-handoff")
}
