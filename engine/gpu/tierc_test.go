package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/rawstore"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// This file tests tier C without a GPU: the layout probe against a real
// pool, and the pipeline's scheduling (stage 1 reads, the copy window, the
// staging hand-back, failed and cancelled passes, Stats) against simDev, a
// simulated device with streams, events and asynchronous copies. The GPU
// tests are in tierc_gpu_test.go.

// tinyPool writes a tiny synthetic model as a GGUF and as a prefab pool
// (type keep: the same tensor bytes) and opens both.
func tinyPool(t testing.TB, arch, typ string) (*model.Model, *prefab.Pool, string) {
	t.Helper()
	dir := t.TempDir()
	g := filepath.Join(dir, arch+"-"+typ+".gguf")
	if err := synth.Write(g, synth.Options{Arch: arch, Shape: "tiny", Type: typ, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, arch+"-"+typ+".pool")
	writePool(t, g, p)
	cpu, err := model.Open(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cpu.Close() })
	pool, err := prefab.OpenPool(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	return cpu, pool, p
}

// writePool converts the GGUF at src into a keep-type pool at dst.
func writePool(t testing.TB, src, dst string) {
	t.Helper()
	mf, err := gguf.Map(src)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if err := prefab.WritePool(mf, dst, prefab.Options{Type: prefab.TypeKeep}); err != nil {
		t.Fatal(err)
	}
}

// TestProbeLayout: the offsets the probe finds are where the pool's
// extent holds each tensor's bytes, for every architecture whose layers
// tier C takes (biases and q/k norms included); a store whose tensors do
// not match the model's is refused.
func TestProbeLayout(t *testing.T) {
	t.Parallel()
	for _, arch := range []string{"llama", "gemma2", "gemma3", "mistral", "qwen2", "qwen3", "mixtral", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			cpu, pool, _ := tinyPool(t, arch, "q4_k_m")
			gemma := kindOf(&cpu.Config) // which optional tensors
			for l := range cpu.Config.Layers {
				e := pool.Extent(l)
				probe := make([]byte, e.Length)
				fillOffsets(probe)
				want := &cpu.Weights.Layers[l]
				lw, err := probeLayout(pool, l, probe, want, gemma)
				if err != nil {
					t.Fatalf("layer %d: %v", l, err)
				}
				ext, err := pool.Mapped(l)
				if err != nil {
					t.Fatal(err)
				}
				// The layerW fields in layerTensors order.
				ptrs := []cudadrv.DevPtr{lw.attnNorm, lw.q.Ptr, lw.k.Ptr, lw.v.Ptr}
				if gemma.bias {
					ptrs = append(ptrs, lw.qBias, lw.kBias, lw.vBias)
				}
				if gemma.qkNorm {
					ptrs = append(ptrs, lw.qNorm, lw.kNorm)
				}
				ptrs = append(ptrs, lw.o.Ptr)
				if gemma.post {
					ptrs = append(ptrs, lw.postAttnNorm)
				}
				ptrs = append(ptrs, lw.ffnNorm, lw.gate.Ptr, lw.up.Ptr, lw.down.Ptr)
				if gemma.post {
					ptrs = append(ptrs, lw.postFFNNorm)
				}
				if len(ptrs) != len(layerTensors(want, gemma)) {
					t.Fatalf("layer %d: %d tensors placed, layerTensors lists %d", l, len(ptrs), len(layerTensors(want, gemma)))
				}
				for i, tn := range layerTensors(want, gemma) {
					off := int64(ptrs[i])
					if off%16 != 0 || !bytes.Equal(ext[off:off+int64(len(tn.Data))], tn.Data) {
						t.Fatalf("layer %d tensor %s: probe says offset %d; the extent's bytes there are not the tensor's", l, tn.Name, off)
					}
				}
				if lw.q.Type != want.Q.Type || lw.down.Rows != want.Down.Rows || lw.down.Cols != want.Down.Cols {
					t.Fatalf("layer %d: matrix descriptions %+v / %+v do not match the model", l, lw.q, lw.down)
				}
			}
			// A model whose tensors differ from the store's is refused.
			other := cpu.Weights.Layers[0]
			other.Q.Data = other.Q.Data[:len(other.Q.Data)-16]
			probe := make([]byte, pool.Extent(0).Length)
			fillOffsets(probe)
			if _, err := probeLayout(pool, 0, probe, &other, gemma); err == nil || !strings.Contains(err.Error(), "attn_q") {
				t.Fatalf("mismatched tensor: %v", err)
			}
		})
	}
}

// simDev is a simulated device: streams are FIFO queues of operations
// that run only when the pipeline calls the driver (a few random steps per
// call, so the device lags the host by varying amounts), events count
// records enqueued and completed (cuStreamWaitEvent waits for the record
// current when the wait was enqueued), and a copy moves its source bytes
// when it executes, so a staging buffer reused too early is caught. Time
// is a step counter, one microsecond per step, for Elapsed.
type simDev struct {
	t       testing.TB
	rng     *rand.Rand
	queues  map[cudadrv.Stream][]simOp
	streams []cudadrv.Stream
	rec     map[cudadrv.Event]int // records enqueued
	done    map[cudadrv.Event]int // records completed
	at      map[cudadrv.Event]int // clock of the last completed record
	mem     map[cudadrv.DevPtr][]byte
	clock   int
	copyChk func(src []byte) error // checks a copy's source as it runs
	copies  atomic.Int64           // copies executed
	pinned  [][]byte               // buffers HostRegister pinned (and not unpinned)
	nextEv  cudadrv.Event
	nextMem cudadrv.DevPtr
	// enqueued counts CopyHtoD calls; onAcquire, when set, is called by
	// simPass as the j-th streamed layer of a pass is acquired.
	enqueued  int
	onAcquire func(j int)
}

type simOp struct {
	wait, rec cudadrv.Event
	gen       int
	dst       cudadrv.DevPtr
	src       []byte
	fn        func() error
}

// newSimDev makes a device with streams (the first is the compute
// stream); NewStream hands out the second.
func newSimDev(t testing.TB, seed uint64, streams ...cudadrv.Stream) *simDev {
	return &simDev{t: t, rng: rand.New(rand.NewPCG(seed, 1)), queues: map[cudadrv.Stream][]simOp{}, streams: streams,
		rec: map[cudadrv.Event]int{}, done: map[cudadrv.Event]int{}, at: map[cudadrv.Event]int{}, mem: map[cudadrv.DevPtr][]byte{},
		nextEv: 100, nextMem: simAllocSpan}
}

// simAllocSpan is how far apart the simulated allocations start, and the
// largest.
const simAllocSpan = 16 << 20

func (d *simDev) Alloc(n int64) (cudadrv.DevPtr, error) {
	p := d.nextMem
	d.nextMem += simAllocSpan
	if n > simAllocSpan {
		return 0, fmt.Errorf("simulated allocation of %d bytes: at most %d", n, simAllocSpan)
	}
	d.mem[p] = make([]byte, n)
	return p, nil
}

// bytesAt is device memory from p to the end of its allocation (nil when p
// lies in none).
func (d *simDev) bytesAt(p cudadrv.DevPtr) []byte {
	base := p - p%simAllocSpan
	b, ok := d.mem[base]
	if !ok || int(p-base) > len(b) {
		return nil
	}
	return b[p-base:]
}

func (d *simDev) Free(p cudadrv.DevPtr) error {
	if _, ok := d.mem[p]; !ok && p != 0 {
		return fmt.Errorf("free of %#x: not allocated", p)
	}
	delete(d.mem, p)
	return nil
}

func (d *simDev) NewEvent(uint32) (cudadrv.Event, error) {
	d.nextEv++
	return d.nextEv, nil
}

func (d *simDev) DestroyEvent(cudadrv.Event) error { return nil }

func (d *simDev) NewStream(uint32) (cudadrv.Stream, error) { return d.streams[1], nil }

func (d *simDev) DestroyStream(s cudadrv.Stream) error {
	if len(d.queues[s]) != 0 {
		return fmt.Errorf("stream %d destroyed with %d operations queued", s, len(d.queues[s]))
	}
	return nil
}

func (d *simDev) HostRegister(b []byte, _ uint32) (*cudadrv.HostMem, error) {
	d.pinned = append(d.pinned, b)
	return &cudadrv.HostMem{}, nil
}

func (d *simDev) HostUnregister(*cudadrv.HostMem) error { return nil }

// isPinned reports whether src starts a buffer HostRegister pinned.
func (d *simDev) isPinned(src []byte) bool {
	for _, b := range d.pinned {
		if len(src) > 0 && len(b) > 0 && &src[0] == &b[0] {
			return true
		}
	}
	return false
}

func (d *simDev) push(s cudadrv.Stream, op simOp) { d.queues[s] = append(d.queues[s], op) }

// step runs the head of one runnable stream (chosen at random); it
// reports false when no stream can move.
func (d *simDev) step() (bool, error) {
	var ready []cudadrv.Stream
	for _, s := range d.streams {
		q := d.queues[s]
		if len(q) > 0 && (q[0].wait == 0 || d.done[q[0].wait] >= q[0].gen) {
			ready = append(ready, s)
		}
	}
	if len(ready) == 0 {
		return false, nil
	}
	s := ready[d.rng.IntN(len(ready))]
	op := d.queues[s][0]
	d.queues[s] = d.queues[s][1:]
	d.clock++
	switch {
	case op.rec != 0:
		d.done[op.rec] = op.gen
		d.at[op.rec] = d.clock
	case op.src != nil:
		if d.copyChk != nil {
			if err := d.copyChk(op.src); err != nil {
				return true, err
			}
		}
		copy(d.bytesAt(op.dst), op.src)
		d.copies.Add(1)
	case op.fn != nil:
		return true, op.fn()
	}
	return true, nil
}

// lag runs up to n random steps.
func (d *simDev) lag(n int) error {
	for range d.rng.IntN(n + 1) {
		if _, err := d.step(); err != nil {
			return err
		}
	}
	return nil
}

// until steps until cond holds, failing on a device that cannot move.
func (d *simDev) until(what string, cond func() bool) error {
	for !cond() {
		moved, err := d.step()
		if err != nil {
			return err
		}
		if !moved {
			return fmt.Errorf("simulated device deadlocked waiting for %s", what)
		}
	}
	return nil
}

func (d *simDev) WaitEvent(s cudadrv.Stream, e cudadrv.Event) error {
	if g := d.rec[e]; g > 0 {
		d.push(s, simOp{wait: e, gen: g})
	}
	return d.lag(2)
}

func (d *simDev) Record(e cudadrv.Event, s cudadrv.Stream) error {
	d.rec[e]++
	d.push(s, simOp{rec: e, gen: d.rec[e]})
	return d.lag(2)
}

func (d *simDev) CopyHtoD(dst cudadrv.DevPtr, src []byte, s cudadrv.Stream) error {
	if len(src) > len(d.bytesAt(dst)) {
		return fmt.Errorf("copy of %d bytes into %d bytes of device memory", len(src), len(d.bytesAt(dst)))
	}
	d.push(s, simOp{dst: dst, src: src})
	d.enqueued++
	return d.lag(2)
}

func (d *simDev) EventDone(e cudadrv.Event) (bool, error) {
	if err := d.lag(3); err != nil {
		return false, err
	}
	return d.done[e] >= d.rec[e], nil
}

func (d *simDev) EventSync(e cudadrv.Event) error {
	g := d.rec[e]
	return d.until(fmt.Sprintf("event %d", e), func() bool { return d.done[e] >= g })
}

func (d *simDev) StreamSync(s cudadrv.Stream) error {
	return d.until(fmt.Sprintf("stream %d", s), func() bool { return len(d.queues[s]) == 0 })
}

func (d *simDev) Elapsed(a, b cudadrv.Event) (float32, error) {
	if d.done[a] == 0 || d.done[b] == 0 || d.done[a] < d.rec[a] || d.done[b] < d.rec[b] {
		return 0, fmt.Errorf("elapsed between events %d and %d: not completed", a, b)
	}
	return float32(d.at[b]-d.at[a]) / 1000, nil
}

// countingSource counts the reads started, and checks at each that no
// more than k staging buffers are in use: reads started minus tier-C
// copies completed on the device.
type countingSource struct {
	tier.Source
	started  atomic.Int64
	copiesC  func() int64
	k        int64
	overflow atomic.Int64
}

func (c *countingSource) ReadAt(ctx context.Context, dst []byte, off int64) error {
	n := c.started.Add(1)
	if c.copiesC != nil && n-c.copiesC() > c.k {
		c.overflow.Store(n - c.copiesC())
	}
	return c.Source.ReadAt(ctx, dst, off)
}

// simPipeline builds a tierB for the simulated device the way loadTierB
// builds it on a GPU: the tier-B layers' bytes in its host memory, the
// store as the tier-C store, and the pipeline over streamDev on the
// simulated driver.
func simPipeline(t testing.TB, store *rawstore.Store, tiers []tier.Tier, k int, src tier.Source) (*tierB, *simDev) {
	t.Helper()
	d := newSimDev(t, uint64(k)*7+uint64(len(tiers)), 1, 2)
	tb := startTierB(t, d, store, tiers, k, src)
	// A copy's source must be a whole layer's bytes when it runs: a
	// staging buffer handed back to stage 1 too early would be caught
	// half overwritten (or holding the next layer).
	d.copyChk = func(src []byte) error {
		for i := range store.Data {
			if bytes.Equal(src, store.Data[i]) {
				return nil
			}
		}
		return fmt.Errorf("a copy ran from %d bytes that are no layer's (staging reused too early?)", len(src))
	}
	return tb, d
}

// startTierB starts the pipeline on d over store the way loadTierB does
// on a GPU: the tier-B layers' bytes in tb's host memory, the store as the
// tier-C store.
func startTierB(t testing.TB, d devOps, store *rawstore.Store, tiers []tier.Tier, k int, src tier.Source) *tierB {
	t.Helper()
	n := len(tiers)
	tb := &tierB{off: make([]int64, n), size: make([]int64, n), tierC: make([]bool, n), tc: store}
	for i, tr := range tiers {
		if tr == tier.TierB {
			tb.off[i] = int64(len(tb.hostBytes))
			tb.hostBytes = append(tb.hostBytes, store.Data[i]...)
		}
		tb.size[i] = store.Ext[i].Length
	}
	if err := tb.start(d, 1, tiers, src, stream.VerifyFirst, k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := errors.Join(tb.pipe.Close(), tb.dev.close()); err != nil {
			t.Error(err)
		}
	})
	return tb
}

// streamedCount is the number of layers tb streams; layerBytes what a pass
// computes over (every layer's bytes).
func streamedCount(tb *tierB) (n int, layerBytes int64) {
	for i, t := range tb.pipe.Tiers() {
		if t != tier.TierA {
			n++
		}
		layerBytes += tb.size[i]
	}
	return n, layerBytes
}

// simPass runs one pass the way Forward's enqueue does: for every layer,
// acquire it (a streamed layer's slot), enqueue "kernels" on the compute
// stream that check the slot holds the layer, and hand it back; then
// drain and end the pass.
func simPass(ctx context.Context, tb *tierB, d *simDev, store *rawstore.Store, cancelAt int) error {
	const compute = cudadrv.Stream(1)
	var cancel context.CancelFunc
	if cancelAt >= 0 {
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	tiers := tb.pipe.Tiers()
	ring := tb.dev.ring
	err := func() error {
		if err := tb.begin(ctx, d); err != nil {
			return err
		}
		n := 0
		for l := range tiers {
			if l == cancelAt {
				cancel()
			}
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cancelled before layer %d: %w", l, err)
			}
			lw, inSlot, err := tb.acquire(l, layerW{})
			if err != nil {
				return fmt.Errorf("layer %d waiting for its copy: %w", l, err)
			}
			if inSlot != (tiers[l] != tier.TierA) {
				return fmt.Errorf("layer %d on tier %v: in a slot %v", l, tiers[l], inSlot)
			}
			if !inSlot {
				d.push(compute, simOp{fn: func() error { return nil }})
			} else {
				j := n
				n++
				if d.onAcquire != nil {
					d.onAcquire(j)
				}
				slot, want := lw.q.Ptr, store.Data[l][:tb.pipe.Length(l)]
				if slot < ring.ptr || slot+cudadrv.DevPtr(len(want)) > ring.ptr+cudadrv.DevPtr(ring.n) {
					return fmt.Errorf("layer %d: weights at %#x, outside the ring [%#x, +%d)", l, slot, ring.ptr, ring.n)
				}
				for range 3 {
					d.push(compute, simOp{fn: func() error {
						if !bytes.Equal(d.bytesAt(slot)[:len(want)], want) {
							return fmt.Errorf("layer %d (streamed %d) computed on the ring before its bytes landed (or after they were overwritten)", l, j)
						}
						return nil
					}})
				}
			}
			if err := tb.done(l); err != nil {
				return fmt.Errorf("layer %d releasing its slot: %w", l, err)
			}
		}
		return nil
	}()
	if serr := d.StreamSync(compute); err == nil {
		err = serr
	}
	if serr := tb.end(d, err != nil); err == nil {
		err = serr
	}
	return err
}

// TestTierCPipelineSimulated drives the pipeline on the simulated device
// for several placements and depths: every layer is computed on its own
// bytes, stage 1 never holds more than k staging buffers, a read error
// fails its pass naming the layer and byte range (and the next pass
// works), a cancelled pass stops cleanly, and Stats count what moved.
func TestTierCPipelineSimulated(t *testing.T) {
	t.Parallel()
	store, path := rawstore.New(t, 9)
	for _, mix := range []string{"all-C", "C,A,C,B,C,C,A,B,C", "A,B,C,B,A,C,C,C,B", "B,B,C,B,B,B,B,C,B"} {
		for _, k := range []int{1, 2, 3} {
			for _, direct := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/k=%d/odirect=%v", mix, k, direct), func(t *testing.T) {
					tiers, err := tier.MixTiers(mix, len(store.Ext))
					if err != nil {
						t.Fatal(err)
					}
					fs, err := stream.OpenFile(path, stream.FileOptions{Buffered: !direct, ChunkBytes: tier.PageSize, QueueDepth: 3})
					if err != nil {
						t.Fatal(err)
					}
					defer fs.Close()
					faulty := stream.NewFaulty(fs)
					cs := &countingSource{Source: faulty, k: int64(k)}
					tb, d := simPipeline(t, store, tiers, k, cs)
					streamed, layerBytes := streamedCount(tb)
					var copiesC atomic.Int64
					// Count tier-C copies completed: copies out of the
					// staging buffers the pipeline pinned, tracked through
					// the check hook.
					chk := d.copyChk
					d.copyChk = func(src []byte) error {
						if d.isPinned(src) {
							copiesC.Add(1)
						}
						return chk(src)
					}
					cs.copiesC = copiesC.Load
					ctx := context.Background()
					var cBytes int64
					for _, l := range tb.cLayers {
						cBytes += store.Ext[l].Length
					}
					for pass := range 3 {
						if err := simPass(ctx, tb, d, store, -1); err != nil {
							t.Fatalf("pass %d: %v", pass, err)
						}
						last := tb.pipe.LastPass()
						if last.Failed != 0 || last.Read.Bytes != cBytes || last.Copy.Bytes != tb.bytes || last.Compute.Bytes != layerBytes {
							t.Fatalf("pass %d stats %+v: want read %d, copy %d, compute %d bytes", pass, last, cBytes, tb.bytes, layerBytes)
						}
						if last.Copy.Busy <= 0 || last.Copy.Layers != int64(streamed) {
							t.Fatalf("pass %d: copy stage %+v", pass, last.Copy)
						}
					}
					if o := cs.overflow.Load(); o != 0 {
						t.Fatalf("stage 1 had %d reads ahead of the completed copies, more than k = %d staging buffers", o, k)
					}
					if len(tb.cLayers) > 0 {
						// A failing extent fails the pass with an error
						// naming the layer and its byte range.
						bad := tb.cLayers[len(tb.cLayers)/2]
						faulty.FailExtent(store.Ext[bad], true)
						err := simPass(ctx, tb, d, store, -1)
						want := fmt.Sprintf("layer %d (tier C, extent %v)", bad, store.Ext[bad])
						if err == nil || !errors.Is(err, stream.ErrInjected) || !strings.Contains(err.Error(), want) {
							t.Fatalf("pass with a bad read: %v, want an error naming %q", err, want)
						}
						if last := tb.pipe.LastPass(); last.Failed != 1 {
							t.Fatalf("failed pass counted as %+v", last)
						}
						// A read failing at a random point, then cancellation.
						faulty.FailNth(int64(1 + len(tb.cLayers)/2))
						if err := simPass(ctx, tb, d, store, -1); !errors.Is(err, stream.ErrInjected) {
							t.Fatalf("pass with the nth read failing: %v", err)
						}
					}
					if err := simPass(ctx, tb, d, store, 4); !errors.Is(err, context.Canceled) {
						t.Fatalf("cancelled pass: %v", err)
					}
					for pass := range 2 {
						if err := simPass(ctx, tb, d, store, -1); err != nil {
							t.Fatalf("pass %d after the failures: %v", pass, err)
						}
					}
					if total := tb.pipe.Stats(); total.Passes != total.Failed+5 || tb.pipe.LastPass().Failed != 0 {
						t.Fatalf("total stats %+v", total)
					}
					wantPinned := 0
					if len(tb.cLayers) > 0 {
						wantPinned = min(k, streamed)
					}
					if len(d.pinned) != wantPinned {
						t.Fatalf("%d staging buffers pinned, want %d", len(d.pinned), wantPinned)
					}
				})
			}
		}
	}
}

// TestRingRunsAhead: layers shortened (the hybrid placement's attention
// prefixes) keep more of them in flight in the ring than its k whole
// layers, and every layer is still computed on its own bytes, under
// random interleavings of the copy and compute streams, through changes
// of the lengths between passes; each pass's timeline has every copy done
// before compute went on from its wait.
func TestRingRunsAhead(t *testing.T) {
	t.Parallel()
	store, _ := rawstore.New(t, 12)
	tiers, _ := tier.MixTiers("all-B", len(store.Ext))
	const k = 2
	tb, d := simPipeline(t, store, tiers, k, nil)
	d.copyChk = func(src []byte) error {
		for i := range store.Data {
			if len(src) > 0 && len(src) <= len(store.Data[i]) && bytes.Equal(src, store.Data[i][:len(src)]) {
				return nil
			}
		}
		return fmt.Errorf("a copy ran from %d bytes that are no layer's prefix", len(src))
	}
	var first int
	d.onAcquire = func(j int) {
		if j == 0 {
			first = d.enqueued
		}
	}
	for round, short := range []int64{0, 256, 1024, 0, 512} {
		for i := range store.Ext {
			n := store.Ext[i].Length
			if short > 0 && i%3 != 1 {
				n = short
			}
			if err := tb.pipe.SetLength(i, n); err != nil {
				t.Fatal(err)
			}
		}
		for pass := range 3 {
			start := d.enqueued
			if err := simPass(context.Background(), tb, d, store, -1); err != nil {
				t.Fatalf("round %d (short %d) pass %d: %v", round, short, pass, err)
			}
			// Copies carried over from the pass before went ahead too.
			ahead := first - start + int(tb.pipe.LastPass().Carried)
			if carried := tb.pipe.LastPass().Carried; pass > 0 && carried == 0 {
				t.Fatalf("round %d pass %d: no copy carried over from the pass before", round, pass)
			}
			if short == 0 && ahead != k {
				t.Fatalf("round %d: whole layers: %d copies issued before the first layer computed, want k = %d", round, ahead, k)
			}
			if short > 0 && ahead <= k+1 {
				t.Fatalf("round %d (short %d): %d copies issued before the first layer computed: the ring did not run ahead of k = %d", round, short, ahead, k)
			}
			// The pass's timeline: a line per layer, each copy done
			// before compute went on from its wait.
			lt, err := tb.dev.layerTimes()
			if err != nil || len(lt) != len(store.Ext) {
				t.Fatalf("round %d pass %d: timeline of %d layers (%v), want %d", round, pass, len(lt), err, len(store.Ext))
			}
			for i, l := range lt {
				if l.CopyEnd < l.CopyStart || l.WaitEnd < l.WaitStart || l.CopyEnd > l.WaitEnd {
					t.Fatalf("round %d pass %d: layer %d's times %+v", round, pass, i, l)
				}
			}
		}
	}
}

// TestTierCVerify: a tier-C extent whose bytes do not match the store's
// checksum fails the pass (VerifyFirst checks every extent's first read).
func TestTierCVerify(t *testing.T) {
	t.Parallel()
	store, path := rawstore.New(t, 4)
	tiers, _ := tier.MixTiers("all-C", 4)
	fs, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	tb, d := simPipeline(t, store, tiers, 2, fs)
	good := store.Data[2]
	store.Data[2] = append([]byte(nil), good...)
	store.Data[2][100] ^= 1
	err = simPass(context.Background(), tb, d, store, -1)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("layer 2 (tier C, extent %v): verify", store.Ext[2])) {
		t.Fatalf("corrupt extent: %v", err)
	}
	store.Data[2] = good
	if err := simPass(context.Background(), tb, d, store, -1); err != nil {
		t.Fatalf("pass after the corruption was repaired: %v", err)
	}
}

// TestTierCOptions: bad tier-C options are refused before anything is
// allocated.
func TestTierCOptions(t *testing.T) {
	t.Parallel()
	cpu, pool, path := tinyPool(t, "gemma2", "f32")
	fs, err := stream.OpenFile(path, stream.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for _, tc := range []struct {
		name   string
		opts   TierC
		stream []int
		want   string
	}{
		{"no store", TierC{Layers: []int{1}, Source: fs}, nil, "no layer store"},
		{"no source", TierC{Layers: []int{1}, Store: pool}, nil, "no source"},
		{"range", TierC{Layers: []int{4}, Store: pool, Source: fs}, nil, "outside"},
		{"twice", TierC{Layers: []int{1, 1}, Store: pool, Source: fs}, nil, "twice"},
		{"B and C", TierC{Layers: []int{1}, Store: pool, Source: fs}, []int{1}, "tier B and tier C"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Model{Config: cpu.Config, opts: Options{TierC: &tc.opts, StreamLayers: tc.stream}}
			streamed, err := m.streamedSet(cpu.Config.Layers)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.tierCSet(cpu.Weights, streamed); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
	m := &Model{Config: cpu.Config, opts: Options{TierC: &TierC{Layers: []int{0, 3}, Store: pool, Source: fs}}}
	set, err := m.tierCSet(cpu.Weights, make([]bool, cpu.Config.Layers))
	if err != nil || set[0] == nil || set[1] != nil || set[3] == nil || set[3].ext != pool.Extent(3) {
		t.Fatalf("valid tier C: %v %v", set, err)
	}
}

// nopDev is a driver on which everything completes at once: events are
// done when recorded and copies move nothing, so what a pass allocates is
// the pipeline's own doing.
type nopDev struct {
	ev  cudadrv.Event
	mem cudadrv.DevPtr
}

func (d *nopDev) Alloc(int64) (cudadrv.DevPtr, error)    { d.mem += 1 << 20; return d.mem, nil }
func (d *nopDev) Free(cudadrv.DevPtr) error              { return nil }
func (d *nopDev) NewEvent(uint32) (cudadrv.Event, error) { d.ev++; return d.ev, nil }
func (d *nopDev) DestroyEvent(cudadrv.Event) error       { return nil }
func (d *nopDev) HostRegister([]byte, uint32) (*cudadrv.HostMem, error) {
	return &cudadrv.HostMem{}, nil
}
func (d *nopDev) HostUnregister(*cudadrv.HostMem) error                 { return nil }
func (d *nopDev) WaitEvent(cudadrv.Stream, cudadrv.Event) error         { return nil }
func (d *nopDev) Record(cudadrv.Event, cudadrv.Stream) error            { return nil }
func (d *nopDev) CopyHtoD(cudadrv.DevPtr, []byte, cudadrv.Stream) error { return nil }
func (d *nopDev) EventDone(cudadrv.Event) (bool, error)                 { return true, nil }
func (d *nopDev) EventSync(cudadrv.Event) error                         { return nil }
func (d *nopDev) StreamSync(cudadrv.Stream) error                       { return nil }
func (d *nopDev) NewStream(uint32) (cudadrv.Stream, error)              { return 2, nil }
func (d *nopDev) DestroyStream(cudadrv.Stream) error                    { return nil }
func (d *nopDev) Elapsed(cudadrv.Event, cudadrv.Event) (float32, error) { return 0.001, nil }

// TestStreamPassAllocs: what a streamed pass allocates on the host does
// not grow with its layers (tiers B and C, read through the page cache):
// acquiring, releasing and copying a layer allocate nothing. (Not
// parallel: testing.AllocsPerRun counts the whole process's allocations.)
func TestStreamPassAllocs(t *testing.T) {
	allocs := func(layers int) float64 {
		store, path := rawstore.New(t, layers)
		src, err := stream.OpenMmap(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		tiers, err := tier.MixTiers(strings.TrimSuffix(strings.Repeat("B,C,A,", layers/3), ","), layers)
		if err != nil {
			t.Fatal(err)
		}
		d := &nopDev{ev: 100}
		tb := startTierB(t, d, store, tiers, 2, src)
		var failed error
		pass := func() {
			err := tb.begin(context.Background(), d)
			for l := range layers {
				if err == nil {
					_, _, err = tb.acquire(l, layerW{})
				}
				if err == nil {
					err = tb.done(l)
				}
			}
			if eerr := tb.end(d, err != nil); err == nil {
				err = eerr
			}
			if err != nil && failed == nil {
				failed = err
			}
		}
		pass() // the first pass verifies the tier-C extents
		n := testing.AllocsPerRun(20, pass)
		if failed != nil {
			t.Fatal(failed)
		}
		if last := tb.pipe.LastPass(); last.Failed != 0 || last.Compute.Layers != int64(layers) {
			t.Fatalf("%d layers: last pass %+v", layers, last)
		}
		return n
	}
	few, many := allocs(6), allocs(24)
	t.Logf("allocations per pass: %.1f with 6 layers, %.1f with 24", few, many)
	if many > few+1 {
		t.Fatalf("a pass of 24 layers allocates %.1f times, one of 6 layers %.1f: something allocates per layer", many, few)
	}
}
