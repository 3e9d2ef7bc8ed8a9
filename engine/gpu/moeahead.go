package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Staging ahead. In a batch layer the pick stream's copies run beside the
// CPU's share, and through the hand-over to the next layer (the GPU's
// attention and router, while the host waits for the routing) the copy
// engine has nothing to carry. The next layer's picks can be guessed
// before then: its router over the residual this layer's FFN reads,
// normed by the next layer's FFN norm (as the CPU's read-ahead of an
// expert store does, model.prefetchNext). The experts the guess gives the
// CPU with the most tokens are copied, behind this layer's own copies,
// into one of two sets of ahead slots (the set the layer before used is
// the one this layer's launches still read); at the next layer's routing
// those that were picked are the GPU's at no copy of their own, and the
// split balances the rest. A wrong guess costs a copy in time the link
// would otherwise idle, and the slots' device memory.
type aheadStage struct {
	slots   cudadrv.DevPtr // 2 sets of aheadSlots slots of the pick stream's slot size
	xn      cudadrv.DevPtr // the guess's normed rows (a pass's tokens, pickedTokens, × Dim float32)
	picks   cudadrv.DevPtr // its ids (rows int32), then weights (rows float32)
	host    *cudadrv.HostMem
	hostDev cudadrv.DevPtr // host's device address: the ids come down with the routing
	rows    int            // picks the buffers hold: stagedRows
	// routed follows a layer's routing on the compute stream (the host
	// waits for it, not for the guess behind it), guessed the guess.
	routed, guessed cudadrv.Event
	// Per set: the layer whose experts it holds (-1 none), which experts
	// and where, and the event after the last launch that read it.
	layer [2]int
	es    [2][]int
	w     [2][]expertW
	read  [2]cudadrv.Event
	// next is the guess's experts for the layer after the current one,
	// chosen once its ids are on the host, copied beside the current
	// layer's share (copyNext); used is the current layer's experts taken
	// from a set, and usedSet that set (-1 none).
	next    []int
	used    []int
	usedSet int
	count   []int // per expert, a guess's tokens (scratch)
	// staged and hits count the experts copied ahead and those of them
	// the next layer's CPU would have computed (its own picks), bytes the
	// copies' bytes.
	staged, hits, bytes int64
}

// aheadSlots is each set's slots: half a token's picks, where a token
// picks four experts or more (none otherwise). A hand-over carries a few
// small experts' copies, and more would run into the next layer's own;
// a model of few large experts (top-2 of 8) has experts larger than a
// hand-over carries.
func aheadSlots(cfg *model.Config) int {
	if cfg.ExpertsUsed < 4 {
		return 0
	}
	return cfg.ExpertsUsed / 2
}

// aheadBytes is the device memory the ahead stage takes for cfg at slot
// bytes a slot (0 without one).
func aheadBytes(cfg *model.Config, slot int64) int64 {
	if aheadSlots(cfg) == 0 {
		return 0
	}
	r := int64(stagedRows(cfg))
	return 2*int64(aheadSlots(cfg))*slot + alignUp(int64(pickedTokens(cfg))*int64(cfg.Dim)*4) + alignUp(r*8)
}

// newAheadStage allocates the ahead slots and the guess's buffers.
func newAheadStage(c *cudadrv.Ctx, cfg *model.Config, slot int64) (a *aheadStage, err error) {
	a = &aheadStage{layer: [2]int{-1, -1}, usedSet: -1, rows: stagedRows(cfg), count: make([]int, cfg.Experts)}
	defer func() {
		if err != nil {
			err = errors.Join(err, a.release(c))
		}
	}()
	if a.slots, err = c.Alloc(2 * int64(aheadSlots(cfg)) * slot); err != nil {
		return nil, fmt.Errorf("ahead slots: %w", err)
	}
	if a.xn, err = c.Alloc(int64(pickedTokens(cfg)) * int64(cfg.Dim) * 4); err != nil {
		return nil, err
	}
	if a.picks, err = c.Alloc(int64(a.rows) * 8); err != nil {
		return nil, err
	}
	if a.host, err = c.HostAlloc(a.rows*4, cudadrv.HostAllocDeviceMap); err != nil {
		return nil, err
	}
	if a.hostDev, err = c.HostDevicePointer(a.host); err != nil {
		return nil, err
	}
	for _, e := range []*cudadrv.Event{&a.read[0], &a.read[1], &a.routed, &a.guessed} {
		if *e, err = c.NewEvent(cudadrv.EventDisableTiming); err != nil {
			return nil, err
		}
	}
	for i := range a.w {
		a.w[i] = make([]expertW, aheadSlots(cfg))
	}
	return a, nil
}

// guess enqueues on s, behind a layer's routing and its copies to the
// host (routed marks them: the host waits for those alone), the next
// layer's guessed routing of the T rows of the residual h (the one the
// current layer's FFN reads): that layer's FFN norm (norm), its router
// (router, bias) and top-k into the scratch logits, and the ids' copy to
// the host (guessed marks it), read by choose.
func (a *aheadStage) guess(c *cudadrv.Ctx, k *kernels.Kernels, s cudadrv.Stream, cfg *model.Config, h, norm, router, bias, logits cudadrv.DevPtr, T int) error {
	K, E, D := cfg.ExpertsUsed, cfg.Experts, cfg.Dim
	if T > pickedTokens(cfg) {
		return fmt.Errorf("guessing the next layer's experts: %d tokens, room for %d", T, pickedTokens(cfg))
	}
	if err := c.Record(a.routed, s); err != nil {
		return err
	}
	if err := k.RMSNorm(c, s, h, norm, a.xn, T, D, cfg.NormEps); err != nil {
		return fmt.Errorf("guessing the next layer's experts, norm: %w", err)
	}
	if err := k.MoELogits(c, s, a.xn, router, bias, logits, T, E, D); err != nil {
		return fmt.Errorf("guessing the next layer's experts, router: %w", err)
	}
	if err := k.MoETopK(c, s, logits, T, E, K, a.picks, a.picks.Add(int64(a.rows)*4)); err != nil {
		return fmt.Errorf("guessing the next layer's experts, top-k: %w", err)
	}
	if err := k.Copy(c, s, a.hostDev, a.picks, int64(T*K)); err != nil {
		return err
	}
	return c.Record(a.guessed, s)
}

// choose waits for the guess of layer l's routing (T tokens) to reach the
// host and keeps for copyNext its experts (guessedCPU).
func (a *aheadStage) choose(c *cudadrv.Ctx, cfg *model.Config, l, T int, resident func(e int) bool) error {
	if err := c.EventSync(a.guessed); err != nil {
		return err
	}
	ids, err := cudadrv.Values[int32](a.host.Bytes()[:T*cfg.ExpertsUsed*4])
	if err != nil {
		return err
	}
	if a.next, err = guessedCPU(a.next[:0], a.count, ids, cfg.Experts, aheadSlots(cfg), resident); err != nil {
		a.next = a.next[:0]
		return fmt.Errorf("the device's guess for layer %d: %w", l, err)
	}
	return nil
}

// guessedCPU appends to dst the distinct experts of the guessed picks ids
// (of E experts) off the device (resident says which are on it), those
// with the most guessed tokens first (the earlier pick on a tie), at most
// slots of them; count is scratch of E.
func guessedCPU(dst, count []int, ids []int32, E, slots int, resident func(e int) bool) ([]int, error) {
	for _, e := range ids {
		if e < 0 || int(e) >= E {
			return dst, fmt.Errorf("expert %d of %d", e, E)
		}
		if resident(int(e)) {
			continue
		}
		if !slices.Contains(dst, int(e)) {
			dst = append(dst, int(e))
			count[e] = 0
		}
		count[e]++
	}
	slices.SortStableFunc(dst, func(p, q int) int { return cmp.Compare(count[q], count[p]) })
	return dst[:min(len(dst), slots)], nil
}

// take moves out of cpu (a layer's distinct CPU experts) those that the
// set holding layer l has, marks them staged and returns them with the
// set; the caller's launch over them records the set's read event
// (staging them over PCIe costs nothing more).
func (a *aheadStage) take(l int, cpu []int, staged []bool) (rest []int) {
	a.used, a.usedSet = a.used[:0], -1
	set := slices.Index(a.layer[:], l)
	if set < 0 {
		return cpu
	}
	rest = cpu[:0]
	for _, e := range cpu {
		if slices.Contains(a.es[set], e) {
			a.used = append(a.used, e)
			staged[e] = true
			continue
		}
		rest = append(rest, e)
	}
	if len(a.used) > 0 {
		a.usedSet = set
		a.hits += int64(len(a.used))
	}
	// A set serves one layer once.
	a.layer[set] = -1
	return rest
}

// weights is expert e's place in the set take used.
func (a *aheadStage) weights(e int) expertW {
	return a.w[a.usedSet][slices.Index(a.es[a.usedSet], e)]
}

// copyNext enqueues on copy the copies of the experts choose kept for
// layer n (L) into the set the current layer does not read, behind the
// last launch that read that set. Called after the current layer's own
// copies, so they go first.
func (a *aheadStage) copyNext(c *cudadrv.Ctx, copy cudadrv.Stream, n int, L *model.Layer, slot int64) error {
	if len(a.next) == 0 {
		return nil
	}
	set := 0
	if a.usedSet == 0 {
		set = 1
	}
	if err := c.WaitEvent(copy, a.read[set]); err != nil {
		return err
	}
	base := a.slots.Add(int64(set*len(a.w[set])) * slot)
	a.es[set] = a.es[set][:0]
	var bytes int64
	for i, e := range a.next {
		w, err := putExpert(c, copy, base.Add(int64(i)*slot), slot, &L.Experts[e])
		if err != nil {
			a.layer[set] = -1
			return fmt.Errorf("staging layer %d's expert %d ahead: %w", n, e, err)
		}
		a.w[set][i] = w
		a.es[set] = append(a.es[set], e)
		bytes += expertSize(&L.Experts[e])
	}
	a.layer[set] = n
	a.staged += int64(len(a.next))
	a.bytes += bytes
	a.next = a.next[:0]
	return nil
}

// release frees the ahead stage.
func (a *aheadStage) release(c *cudadrv.Ctx) error {
	if a == nil {
		return nil
	}
	err := errors.Join(c.Free(a.slots), c.Free(a.xn), c.Free(a.picks), c.FreeHost(a.host))
	for _, e := range []cudadrv.Event{a.read[0], a.read[1], a.routed, a.guessed} {
		if e != 0 {
			err = errors.Join(err, c.DestroyEvent(e))
		}
	}
	*a = aheadStage{}
	return err
}

// clear ends the layer take served: its experts' staged marks go, and
// no later launch takes the set for its own.
func (a *aheadStage) clear(staged []bool) {
	for _, e := range a.used {
		staged[e] = false
	}
	a.used, a.usedSet = a.used[:0], -1
}

// aheadFor is the ahead stage where layer l of a pass of T tokens
// guesses the next layer's experts: a batch layer the picked kernels run
// (batchPicked), whose next layer has experts off the device, in a model
// whose layers' norms are all in device memory (none streamed). Nil
// otherwise.
func (m *Model) aheadFor(l, T int, batchPicked bool) *aheadStage {
	x := m.moe
	if x.ps == nil || x.ps.ahead == nil || !batchPicked || T < 2 || l+1 >= len(x.layers) || m.tb != nil {
		return nil
	}
	if n := l + 1; len(x.layers[n].Experts) == 0 || len(x.resident[n]) >= m.Config.Experts {
		return nil
	}
	return x.ps.ahead
}
