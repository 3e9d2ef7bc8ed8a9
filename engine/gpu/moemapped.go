package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Mapped experts. At one token a layer whose picks the device holds runs
// without the host (moePicked's full layers); one with a pick in host
// memory hands its routing to the host, which starts the CPU on that pick
// and, with the pick stream, copies a share to the GPU: a round trip
// through the host in every such layer, whatever its few bytes. With
// mapped experts the host experts' pages are pinned and mapped for the
// device, the tables give every expert the device does not hold its host
// copy's device address, and each layer begins with one launch
// (kernels.MoEStage) that copies the token's picks among those into
// device slots, every block of it copying, before the picked kernels run
// them there: every layer runs without the host, and a layer costs its
// off-device bytes at the rate the GPU pulls them over PCIe. It pays
// where a layer's off-device picks are few, as when most of the routing's
// use is resident; where they are many the CPU and the copy engine
// together move more. Which is the faster is measured (the engine bench's
// dev_mapped_* rows against dev_stream_*), not assumed. The picked kernels
// reading the host copies in place as they compute, with no staging,
// moved those bytes at 0.51-0.58 of a pinned copy's rate against the
// staging's 0.65-0.91 (kernels' BenchmarkMoEPickedMapped) and lost every
// row of the engine bench to it.

// hostExperts is the host experts' pages, page-locked in place and mapped
// for the device: what the pick stream copies from and mapped experts are
// read from. One pinning serves both, as the driver refuses to register a
// page twice.
type hostExperts struct {
	pinned []*cudadrv.HostMem
	// addrs is every host expert's device addresses, per layer and
	// expert (gate, up, down), for the GPU to pull them from; nil,
	// with addrErr saying why, where the kernels cannot (copies still
	// can).
	addrs   [][][3]uint64
	addrErr error
	users   int
}

// pinHost pins x's host experts (once; each call is a user unpinHost
// releases). It fails for experts served by an expert source, which are
// read from storage into buffers of the source's.
func (x *gpuMoE) pinHost(c *cudadrv.Ctx, E int) (*hostExperts, error) {
	if x.pin != nil {
		x.pin.users++
		return x.pin, nil
	}
	if x.src != nil {
		return nil, errors.New("the experts are served from storage, not held in host memory")
	}
	var bufs [][]byte
	for l, L := range x.layers {
		if len(L.Experts) != E {
			return nil, fmt.Errorf("layer %d holds %d of %d experts", l, len(L.Experts), E)
		}
		for e := range L.Experts {
			ex := &L.Experts[e]
			bufs = append(bufs, ex.Gate.Data, ex.Up.Data, ex.Down.Data)
		}
	}
	h := &hostExperts{users: 1}
	// Mapped for the device where the driver allows it; read-only where
	// the mapping is (safetensors), which copies and kernels reading it
	// need no more than; unmapped as a last resort, which leaves the
	// copies and not the GPU's pulls.
	var errs []error
	mapped := false
	for _, flags := range []uint32{
		cudadrv.HostRegisterDeviceMap,
		cudadrv.HostRegisterDeviceMap | cudadrv.HostRegisterReadOnly,
		0,
		cudadrv.HostRegisterReadOnly,
	} {
		p, err := c.HostRegisterRanges(bufs, flags)
		if err == nil {
			h.pinned, mapped = p, flags&cudadrv.HostRegisterDeviceMap != 0
			break
		}
		errs = append(errs, err)
	}
	if h.pinned == nil {
		return nil, fmt.Errorf("pinning the host experts: %w", errors.Join(errs...))
	}
	if mapped {
		h.addrs, h.addrErr = x.hostAddrs(c, h.pinned)
	} else {
		h.addrErr = fmt.Errorf("the host experts are pinned but not mapped for the device: %w", errors.Join(errs...))
	}
	x.pin = h
	return h, nil
}

// mappedAlign is the alignment the picked kernels' vector loads need of
// a matrix's first byte.
const mappedAlign = 16

// hostAddrs returns the device addresses of x's host experts in the
// pinned ranges, per layer and expert (gate, up, down), or why the
// GPU cannot pull them.
func (x *gpuMoE) hostAddrs(c *cudadrv.Ctx, pinned []*cudadrv.HostMem) ([][][3]uint64, error) {
	m, err := c.MapRanges(pinned)
	if err != nil {
		return nil, fmt.Errorf("mapping the host experts: %w", err)
	}
	out := make([][][3]uint64, len(x.layers))
	for l, L := range x.layers {
		out[l] = make([][3]uint64, len(L.Experts))
		for e := range L.Experts {
			ex := &L.Experts[e]
			for i, t := range []*model.Tensor{&ex.Gate, &ex.Up, &ex.Down} {
				a, err := m.Addr(t.Data)
				if err != nil {
					return nil, fmt.Errorf("layer %d expert %d %s: %w", l, e, t.Name, err)
				}
				if a%mappedAlign != 0 {
					return nil, fmt.Errorf("layer %d expert %d %s: its bytes start at %#x, not %d-byte aligned as the kernels' loads need", l, e, t.Name, uint64(a), mappedAlign)
				}
				out[l][e][i] = uint64(a)
			}
		}
	}
	return out, nil
}

// pinMapped pins the host experts for a user that has the GPU pull them
// from host memory (mapped experts) and checks
// that the picked kernels take every layer; it returns the experts'
// device addresses. On failure nothing stays pinned for it.
func (x *gpuMoE) pinMapped(c *cudadrv.Ctx, m *Model) ([][][3]uint64, error) {
	cfg := &m.Config
	K, E := cfg.ExpertsUsed, cfg.Experts
	if x.src != nil {
		return nil, errors.New("the experts are served from storage, not held in host memory")
	}
	if x.picked == nil {
		return nil, errors.New("no expert tables")
	}
	for l, L := range x.layers {
		if len(L.Experts) != E {
			return nil, fmt.Errorf("layer %d holds %d of %d experts", l, len(L.Experts), E)
		}
		if p := stagedPicked(L, x.picked[l].Table, E); !m.k.CanMoEPicked(m.stream, p, K) {
			return nil, fmt.Errorf("layer %d: the picked expert kernels do not take %v %dx%d gates and %v downs", l, p.Gate.Type, p.Gate.Rows, p.Gate.Cols, p.Down.Type)
		}
	}
	h, err := x.pinHost(c, E)
	if err != nil {
		return nil, err
	}
	if h.addrErr != nil {
		return nil, errors.Join(h.addrErr, x.unpinHost(c))
	}
	return h.addrs, nil
}

// unpinHost ends one user of the pinning, unpinning the pages after the
// last.
func (x *gpuMoE) unpinHost(c *cudadrv.Ctx) error {
	if x.pin == nil {
		return nil
	}
	if x.pin.users--; x.pin.users > 0 {
		return nil
	}
	err := x.pin.unpin(c)
	x.pin = nil
	return err
}

func (h *hostExperts) unpin(c *cudadrv.Ctx) error {
	var err error
	for _, p := range h.pinned {
		err = errors.Join(err, c.HostUnregister(p))
	}
	h.pinned = nil
	return err
}

// MappedWay says when passes at one token pull the experts the device
// does not hold over PCIe (mapped experts, see above).
type MappedWay int

const (
	// MappedOff: never; the host's way (the CPU, and the pick stream
	// where it is on) computes them.
	MappedOff MappedWay = iota
	// MappedOn: always.
	MappedOn
	// MappedTrial: the faster of the two at one token, by trial (as the
	// resident experts' way is chosen, moechoice.go, and after it), again
	// whenever the resident experts change. Pulled layers are all GPU and
	// bound by PCIe; the host's way adds the CPU's memory reads at a round
	// trip a layer, so which wins depends on how many of a layer's picks
	// are off the device: few where the routing is skewed toward the
	// resident experts, many where it is near uniform.
	MappedTrial
)

// SetMappedExperts sets when the experts the device does not hold are
// pulled over PCIe at one token: the picked expert kernels' tables get
// their host copies' device addresses, each layer's picks among them are
// staged into device slots by the GPU, and every layer then runs on the
// GPU without the host (see above). Any way but MappedOff pins the host
// experts in place and takes ExpertsUsed slots of the largest expert and
// a table of device memory (MappedStageBytes); MappedOff releases them.
// It fails for a model whose experts an expert source serves, whose
// shapes the picked kernels do not take, or whose experts' bytes are not
// aligned for the copies; the model is then as before. Passes of more
// tokens keep the CPU for the experts the device does not hold.
func (m *Model) SetMappedExperts(way MappedWay) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.moe
	if x == nil {
		return errors.New("mapped experts: not a mixture-of-experts model")
	}
	if way < MappedOff || way > MappedTrial {
		return fmt.Errorf("mapped experts: unknown way %d", way)
	}
	if way == x.mapWay {
		return nil
	}
	return m.dev.Do(func(c *cudadrv.Ctx) error {
		// Passes drain the stream; the layers that ran without the host
		// are counted before their tables change.
		if err := c.StreamSync(m.stream); err != nil {
			return err
		}
		if err := x.tally(); err != nil {
			return err
		}
		x.choice.reset()
		if way == MappedOff {
			x.mapped, x.mapAddrs, x.mapWay = nil, nil, MappedOff
			return errors.Join(x.freeStaging(c), x.writeTables(c, m.stream), x.unpinHost(c))
		}
		if x.mapWay == MappedOff {
			if err := x.allocStaging(c, &m.Config); err != nil {
				return fmt.Errorf("mapped experts: %w", err)
			}
			addrs, err := x.pinMapped(c, m)
			if err != nil {
				return fmt.Errorf("mapped experts: %w", errors.Join(err, x.freeStaging(c)))
			}
			x.mapAddrs = addrs
		}
		x.mapWay = way
		if err := x.pullMapped(c, m.stream, way == MappedOn); err != nil {
			x.mapped, x.mapAddrs, x.mapWay = nil, nil, MappedOff
			return fmt.Errorf("mapped experts: %w", errors.Join(err, x.writeTables(c, m.stream), x.unpinHost(c), x.freeStaging(c)))
		}
		return nil
	})
}

// pullMapped makes the tables give the experts the device does not hold
// their host copies (on: the passes at one token pull them) or nothing
// (the host's way), rewriting them where that changes. The stream must be
// drained: the layers that ran without the host are counted first.
func (x *gpuMoE) pullMapped(c *cudadrv.Ctx, s cudadrv.Stream, on bool) error {
	if on == (x.mapped != nil) {
		return nil
	}
	if err := x.tally(); err != nil {
		return err
	}
	if on {
		x.mapped = x.mapAddrs
	} else {
		x.mapped = nil
	}
	return x.writeTables(c, s)
}

// mappedPass says whether the next pass of T tokens pulls the mapped
// experts, and whether it is one of the mapped way's trial (to record).
// deviceTrial says the resident experts' way is being chosen too: that
// is decided first.
func (x *gpuMoE) mappedPass(T int, deviceTrial, noTrial bool) (pull, trial bool) {
	switch {
	case x.mapWay == MappedOff:
		return false, false
	case x.mapWay == MappedOn:
		return true, false
	case T != 1:
		// Passes of more tokens do not read the tables' host entries.
		return x.mapped != nil, false
	case noTrial || deviceTrial && !x.choice.trial().Decided(1):
		return false, false
	}
	return !x.choice.mappedTrial().First(1), true
}

// MappedPicks counts the (token, expert) picks at one token the GPU
// pulled from host memory (SetMappedExperts), and their experts' bytes.
type MappedPicks struct {
	Picks int64 `json:"picks"`
	Bytes int64 `json:"bytes"`
	// Way is SetMappedExperts's; under MappedTrial, Decided says the
	// trial at one token is over, Kept that it kept pulling them, and
	// MappedPass and HostPass are the median pass times each way that
	// decided it.
	Way        MappedWay     `json:"way"`
	Decided    bool          `json:"decided"`
	Kept       bool          `json:"kept"`
	MappedPass time.Duration `json:"mapped_pass_ns"`
	HostPass   time.Duration `json:"host_pass_ns"`
}

// SetSplitPicks lets the pick stream (SetStreamPicks, which must be on)
// share a pick by its FFN width where a layer has few CPU picks: the CPU
// computes its first columns, the GPU the rest, copied into a slot (the
// down's columns by one 2D copy).
// Mixtral's layers have one or two CPU picks of ~100 MB, and whole picks
// then balance the two links in steps of half a layer or more.
func (m *Model) SetSplitPicks(on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ps, err := m.pickStreamFor("split picks", on)
	if ps != nil {
		ps.widthSplit = on
	}
	return err
}

// pickStreamFor is the pick stream a setter of its ways (what names it in
// errors) changes, with m.mu held: nil with an error for a dense model or
// where the stream is off and on asks for a way of it, nil alone where
// it is off and off is asked (nothing to do).
func (m *Model) pickStreamFor(what string, on bool) (*gpuMoE, *pickStream, error) {
	x := m.moe
	if x == nil {
		return nil, nil, fmt.Errorf("%s: not a mixture-of-experts model", what)
	}
	if x.ps == nil && on {
		return x, nil, fmt.Errorf("%s: the pick stream is off", what)
	}
	return x, x.ps, nil
}

// mappedStaging is mapped experts' device memory: ExpertsUsed slots, each
// of the largest expert's slot layout, and the table kernels.MoEStage
// writes a layer's staged picks into.
type mappedStaging struct {
	bytes int64 // the allocation's, from st.Slots
	st    kernels.MoEStaging
}

// stageBytes is the device memory mapped experts take for cfg's model of
// layers: a slot's bytes, and the slots' and the table's.
func stageBytes(cfg *model.Config, layers []*model.Layer) (slot, total int64, err error) {
	for l, L := range layers {
		_, _, size, err := kernels.MoEStageLayout(stagedPicked(L, 0, cfg.Experts))
		if err != nil {
			return 0, 0, fmt.Errorf("layer %d: %w", l, err)
		}
		slot = max(slot, size)
	}
	return slot, slotsBytes(cfg, slot), nil
}

// MappedStageBytes is the device memory SetMappedExperts takes for cfg's
// model whose largest expert is largest bytes, at most: the staging slots
// (each matrix of an expert 256-byte aligned) and their table.
func MappedStageBytes(cfg *model.Config, largest int64) int64 {
	if !cfg.MoE() || largest <= 0 {
		return 0
	}
	return slotsBytes(cfg, slotFor(largest))
}

// allocStaging allocates the mapped picks' slots and table (stageBytes).
func (x *gpuMoE) allocStaging(c *cudadrv.Ctx, cfg *model.Config) error {
	slot, total, err := stageBytes(cfg, x.layers)
	if err != nil {
		return err
	}
	mem, err := c.Alloc(total)
	if err != nil {
		return fmt.Errorf("staging slots (%d bytes): %w", total, err)
	}
	K := int64(cfg.ExpertsUsed)
	x.stage = &mappedStaging{bytes: total, st: kernels.MoEStaging{Slots: mem, SlotBytes: slot, Table: mem.Add(K * slot)}}
	x.expertBytes += total
	return nil
}

// freeStaging frees the mapped picks' slots and table, if any.
func (x *gpuMoE) freeStaging(c *cudadrv.Ctx) error {
	if x.stage == nil {
		return nil
	}
	err := c.Free(x.stage.st.Slots)
	x.expertBytes -= x.stage.bytes
	x.stage = nil
	return err
}
