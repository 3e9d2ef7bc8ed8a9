package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// SwapResidentExperts makes, swap by swap, layer Layer's expert In
// resident in device memory in the place of layer OutLayer's expert Out:
// while a model serves, the engine moves its device experts toward the
// routing it measures (tier.ExpertPlan.DeviceSwaps) a few at a time,
// where SetResidentExperts would upload every expert again. It runs
// between passes, which wait for it (each swap is one expert's copy from
// where the host holds it, and two table entries).
//
// It returns the swaps done. A swap whose In does not fit Out's place is
// left out (the caller's sizes are the experts' own, the places are
// aligned); one whose experts are out of range, whose Out is not
// resident or whose In already is fails the call, before that swap
// touches anything. A copy that fails leaves that swap's Out not
// resident either (ResidentExperts says what is).
func (m *Model) SwapResidentExperts(ctx context.Context, swaps []tier.DeviceSwap) ([]tier.DeviceSwap, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("swapping resident experts: model closed")
	}
	x := m.moe
	if x == nil {
		return nil, errors.New("swapping resident experts: not a mixture-of-experts model")
	}
	var done []tier.DeviceSwap
	err := m.dev.Do(func(c *cudadrv.Ctx) error {
		// Passes drain the stream; the routing counts of layers that ran
		// without the host are taken before their table changes.
		if err := c.StreamSync(m.stream); err != nil {
			return err
		}
		if err := x.tally(); err != nil {
			return err
		}
		for _, sw := range swaps {
			ok, err := x.swap(ctx, c, m.stream, &m.Config, sw)
			if err != nil {
				return fmt.Errorf("layer %d expert %d in the place of layer %d expert %d: %w", sw.Layer, sw.In, sw.OutLayer, sw.Out, err)
			}
			if ok {
				done = append(done, sw)
			}
		}
		return nil
	})
	if err != nil {
		return done, fmt.Errorf("swapping resident experts: %w", err)
	}
	return done, nil
}

// swap is one of SwapResidentExperts' swaps; it answers false for an
// expert that does not fit the place.
func (x *gpuMoE) swap(ctx context.Context, c *cudadrv.Ctx, s cudadrv.Stream, cfg *model.Config, sw tier.DeviceSwap) (bool, error) {
	L, E := len(x.resident), cfg.Experts
	for _, le := range [][2]int{{sw.Layer, sw.In}, {sw.OutLayer, sw.Out}} {
		if le[0] < 0 || le[0] >= L || le[1] < 0 || le[1] >= E {
			return false, fmt.Errorf("no expert %d of layer %d (%d layers of %d experts)", le[1], le[0], L, E)
		}
	}
	old, ok := x.resident[sw.OutLayer][sw.Out]
	if !ok {
		return false, errors.New("the expert to replace is not resident")
	}
	if _, ok := x.resident[sw.Layer][sw.In]; ok {
		return false, errors.New("the expert is resident already")
	}
	ex, err := layerExpert(ctx, x.layers[sw.Layer], x.src, sw.Layer, sw.In)
	if err != nil {
		return false, err
	}
	if expertSize(ex) > old.size {
		return false, nil
	}
	// The place's table entry goes first: from here no kernel reads it.
	delete(x.resident[sw.OutLayer], sw.Out)
	x.full[sw.OutLayer] = x.layerFull(sw.OutLayer)
	x.stats.ResidentExperts--
	if err := x.setEntry(c, s, cfg, sw.OutLayer, sw.Out, nil); err != nil {
		return false, err
	}
	d, err := putExpert(c, s, old.gate.Ptr, old.size, ex)
	if err == nil {
		err = x.setEntry(c, s, cfg, sw.Layer, sw.In, &d)
	}
	// An expert source's weights stay valid only until its next call.
	if serr := c.StreamSync(s); err == nil {
		err = serr
	}
	if err != nil {
		return false, err
	}
	if x.resident[sw.Layer] == nil {
		x.resident[sw.Layer] = map[int]expertW{}
	}
	x.resident[sw.Layer][sw.In] = d
	x.full[sw.Layer] = x.layerFull(sw.Layer)
	x.stats.ResidentExperts++
	p := &x.picked[sw.Layer]
	p.Gate, p.Up, p.Down = d.gate, d.up, d.down
	return true, nil
}

// setEntry writes layer l's expert e's entry of the picked kernels'
// tables: d's three matrices, or for nil what the expert is without them
// (its host copy where mapped, else zeros: not resident).
func (x *gpuMoE) setEntry(c *cudadrv.Ctx, s cudadrv.Stream, cfg *model.Config, l, e int, d *expertW) error {
	ent := x.entry(l, e)
	if d != nil {
		ent = [3]uint64{uint64(d.gate.Ptr), uint64(d.up.Ptr), uint64(d.down.Ptr)}
	}
	at := x.tables.Add(int64((l*cfg.Experts+e)*3) * 8)
	if err := cudadrv.Upload(c, at, ent[:], s); err != nil {
		return fmt.Errorf("resident expert table: %w", err)
	}
	return nil
}

// ResidentExperts lists, per layer, the experts held in device memory
// now (sorted).
func (m *Model) ResidentExperts() [][]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return nil
	}
	out := make([][]int, len(m.moe.resident))
	for l, res := range m.moe.resident {
		for e := range res {
			out[l] = append(out[l], e)
		}
		slices.Sort(out[l])
	}
	return out
}
