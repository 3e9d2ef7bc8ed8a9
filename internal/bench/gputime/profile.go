package gputime

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
)

// StepProfile is where the time of one batch-1 decode step goes on the
// device and on the host.
type StepProfile struct {
	// Kernels is the number of kernel launches in the step (the captured
	// graph's nodes).
	Kernels int
	// Device is the device time of one graph replay of the step's kernels
	// (captured without the copies Forward's graphs may hold), with no
	// host gaps between them.
	Device time.Duration
	// GEMV is the device time of the step's matrix-vector products alone
	// (every layer's matrices and the output projection, launched as the
	// step launches them — q/k/v and gate/up fused where the pass fuses
	// them — and replayed from a graph); WeightBytes is what they read, so
	// WeightBytes ÷ GEMV is their effective bandwidth.
	GEMV        time.Duration
	WeightBytes int64
	// GEMVReadOnly is GEMV's launch sequence with every integer GEMV
	// launch replaced by one that only reads its matrices
	// (gpu.Capture.ReadOnly; down's x quantization still runs): the
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
	// column slices (which quantize their own x): for those DownHeld times
	// the one-vector kernels the slices replaced, on the held x.
	DownSliced int
	// DeviceSerial and GEMVSerial are Device and GEMV with programmatic
	// dependent launch off: every kernel waits for its predecessor to
	// complete before it launches. Zero where the step's launches do not
	// overlap (gpu.StepProbe.Overlapped).
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
	// one that only reads its matrices (GEMVReadOnly's ceiling for this
	// kind alone; zero where it was not measured).
	ReadOnly time.Duration
}

// ProfileDecodeStep profiles a batch-1 decode step of a resident model
// (streamed layers rule out graph replay): it holds the step of a 16-token
// prompt's first decode token (gpu.Model.ProbeDecodeStep), then times
// iters replays of the step's kernels, of its GEMVs alone and by kind (and
// their read-only ceilings, down without its x launch, and the serial
// variants where they exist), and the host's cost of enqueueing the step
// kernel by kernel and of launching its graph.
func ProfileDecodeStep(ctx context.Context, m *gpu.Model, iters int) (*StepProfile, error) {
	if iters < 1 {
		return nil, fmt.Errorf("profile decode step: %d iterations", iters)
	}
	prof := &StepProfile{}
	err := m.ProbeDecodeStep(ctx, Prompt(m.Config.Vocab, 16, 0), func(p *gpu.StepProbe) error {
		c, st := p.Ctx(), p.Stream()
		// replay captures o's piece and times iters replays of it:
		// launched one by one, the small GEMVs would time the host's
		// launch rate rather than the device.
		replay := func(o gpu.Capture) (time.Duration, error) {
			g, err := p.Capture(o)
			if err != nil {
				return 0, err
			}
			el, err := c.TimeEvents(st, iters, g.Launch)
			keepFirst(&err, g.Close)
			return el, err
		}
		kinds := p.Kinds()
		for _, k := range kinds {
			prof.WeightBytes += k.Bytes
			prof.GEMVKinds = append(prof.GEMVKinds, GEMVKindProfile{Name: k.Name, Bytes: k.Bytes, Launches: k.Launches})
		}
		// The step's kernels alone: Device is their time, comparable
		// whatever the copies' placement; the host's launch timings below
		// replay the same graph.
		step, err := p.Capture(gpu.Capture{})
		if err != nil {
			return err
		}
		defer step.Close()
		prof.Kernels = step.Nodes
		if prof.Device, err = c.TimeEvents(st, iters, step.Launch); err != nil {
			return err
		}
		if prof.GEMV, err = replay(gpu.Capture{GEMVs: gpu.AllGEMVs}); err != nil {
			return err
		}
		for i, k := range kinds {
			if prof.GEMVKinds[i].Time, err = replay(gpu.Capture{GEMVs: k.Set}); err != nil {
				return err
			}
		}
		if p.IntegerGEMVs() {
			if prof.GEMVReadOnly, err = replay(gpu.Capture{GEMVs: gpu.AllGEMVs, ReadOnly: true}); err != nil {
				return err
			}
			for i, k := range kinds {
				if prof.GEMVKinds[i].ReadOnly, err = replay(gpu.Capture{GEMVs: k.Set, ReadOnly: true}); err != nil {
					return err
				}
			}
		}
		prof.DownSliced = p.DownSliced()
		if p.IntegerGEMVs() && kinds[0].Launches > 0 {
			prof.DownHeld, prof.DownHeldErr = replay(gpu.Capture{GEMVs: gpu.GEMVDown, HeldDownX: true})
		}
		if p.Overlapped() {
			if prof.DeviceSerial, err = replay(gpu.Capture{Serial: true}); err != nil {
				return err
			}
			if prof.GEMVSerial, err = replay(gpu.Capture{GEMVs: gpu.AllGEMVs, Serial: true}); err != nil {
				return err
			}
		}
		prof.HostEnqueue, prof.HostGraphLaunch, err = hostLaunch(p, step, iters)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("profile decode step: %w", err)
	}
	return prof, nil
}

// hostLaunch measures the host's cost of issuing the probed step: kernel
// by kernel, and as one launch of its graph. The stream is drained
// between samples so the queue never fills.
func hostLaunch(p *gpu.StepProbe, step *gpu.StepGraph, iters int) (direct, graph time.Duration, err error) {
	c, st := p.Ctx(), p.Stream()
	for range iters {
		t := time.Now()
		if err := p.Enqueue(); err != nil {
			return 0, 0, err
		}
		direct += time.Since(t)
		if err := c.StreamSync(st); err != nil {
			return 0, 0, err
		}
		t = time.Now()
		if err := step.Launch(); err != nil {
			return 0, 0, err
		}
		graph += time.Since(t)
		if err := c.StreamSync(st); err != nil {
			return 0, 0, err
		}
	}
	return direct / time.Duration(iters), graph / time.Duration(iters), nil
}
