package gpu_test

import (
	"context"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/internal/bench/gputime"
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }

// BenchmarkDecodeHost measures where a resident 8b decode step's time
// beyond the device's goes (STRATA_8B_GGUF; run with -test.benchtime 1x):
// the empty Device.Do round trip, the step's kernels alone (device time of
// a graph replay), and, for each combination of the result (greedy token
// selected on the device, or the logits row downloaded), the copies'
// place (inside the decode graph or around it) and the Device.Do
// hand-offs (sleeping, or spinning: Device.SetSpin), the decode rate and the
// host phases of gputime.TimeDecode. The sweep runs twice, so run-to-run
// noise shows next to the differences.
func BenchmarkDecodeHost(b *testing.B) {
	const spinFor = 20 * time.Millisecond // longer than a step: Do's caller never sleeps
	cpu, dev := gpu.OpenBig(b, "STRATA_8B_GGUF", "8b")
	g := gpu.LoadGPU(b, cpu, gpu.Options{MaxSeqs: 1, MaxContext: 1024})
	ctx := context.Background()

	hand, err := gputime.DeviceHandoff(dev, 2000)
	if err != nil {
		b.Fatal(err)
	}
	dev.SetSpin(spinFor)
	handSpin, err := gputime.DeviceHandoff(dev, 2000)
	dev.SetSpin(0)
	if err != nil {
		b.Fatal(err)
	}
	prof, err := gputime.ProfileDecodeStep(ctx, g, 50)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("empty Device.Do round trip %.1f us (%.1f us spinning); decode step kernels alone %.3f ms (%d kernels, graph); host graph launch %.1f us",
		us(hand), us(handSpin), ms(prof.Device), prof.Kernels, us(prof.HostGraphLaunch))

	// The device cost of selecting on the device: the step's kernels
	// alone, captured without and with the final arg max.
	var kern [2]time.Duration
	err = g.ProbeDecodeStep(ctx, gputime.Prompt(cpu.Config.Vocab, 16, 0), func(p *gpu.StepProbe) error {
		for i, sel := range []bool{false, true} {
			gr, err := p.Capture(gpu.Capture{Select: sel})
			if err != nil {
				return err
			}
			kern[i], err = p.Ctx().TimeEvents(p.Stream(), 100, gr.Launch)
			if cerr := gr.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("decode step kernels: %.1f us, with the device arg max %.1f us (+%.1f us)", us(kern[0]), us(kern[1]), us(kern[1]-kern[0]))

	def := gpu.DecodeVariantOf(g)
	defer func() {
		if _, err := gpu.SetDecodeVariant(g, def); err != nil {
			b.Error(err)
		}
	}()
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
			dv := def
			dv.Copies = v.copies
			if _, err := gpu.SetDecodeVariant(g, dv); err != nil {
				b.Fatal(err)
			}
			if v.spin {
				dev.SetSpin(spinFor)
			} else {
				dev.SetSpin(0)
			}
			r, err := gputime.TimeDecode(ctx, g, gputime.DecodeOptions{Batch: 1, Prompt: 16, Warmup: 8, Steps: 256, Greedy: v.greedy})
			if err != nil {
				b.Fatalf("%s: %v", name(v), err)
			}
			if !r.Graph || r.DeviceSelect != v.greedy || r.GraphCopies != v.copies {
				b.Errorf("%s: graph %v, device select %v, copies in graph %v (%s)", name(v), r.Graph, r.DeviceSelect, r.GraphCopies, r.CopiesNote)
			}
			h := r.Phases
			b.Logf("[round %d] %-58s %.1f tok/s (%.3f ms/step); wall - kernels %.1f us = to device %.1f + enqueue %.1f (launch returned at %.1f) + wait %.1f (- kernels %.1f) + back %.1f + scatter %.1f",
				round, name(v), r.TokensPerSecond, ms(r.PerPass), us(r.PerPass-prof.Device),
				us(h.ToDevice), us(h.Enqueue), us(h.Launch), us(h.Wait), us(h.Wait-prof.Device), us(h.FromDevice), us(h.Scatter))
			best[v] = max(best[v], r.TokensPerSecond)
		}
	}
	b.ReportMetric(best[variant{true, true, false}], "greedy-tok/s")
	b.ReportMetric(best[variant{false, true, false}], "logits-tok/s")
	b.ReportMetric(best[variant{true, true, true}], "greedy-spin-tok/s")
	b.ReportMetric(us(hand), "us-handoff")
}
