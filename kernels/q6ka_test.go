package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestRelayQ6KPermutation: for every pad a block can have, the re-lay
// moves each of the 210 bytes to a distinct place inside the block.
func TestRelayQ6KPermutation(t *testing.T) {
	t.Parallel()
	for p := 0; p < 16; p += 2 {
		seen := make(map[int]int)
		q6kaPerm(p, func(q6k, q6ka int) {
			if q6k < 0 || q6k >= q6kaBlock || q6ka < 0 || q6ka >= q6kaBlock {
				t.Fatalf("pad %d: byte %d -> %d outside the block", p, q6k, q6ka)
			}
			if prev, ok := seen[q6ka]; ok {
				t.Fatalf("pad %d: bytes %d and %d both land at %d", p, prev, q6k, q6ka)
			}
			seen[q6ka] = q6k
		})
		if len(seen) != q6kaBlock {
			t.Fatalf("pad %d: %d bytes placed, want %d", p, len(seen), q6kaBlock)
		}
	}
}

// TestRelayQ6KHost: the host re-lay and its inverse round-trip for
// several device addresses, and what the device code reads from a re-laid
// block — transcribed here: QW6::load_a / DQ6KA::load (a unit's words)
// and Part<T_Q6_KA> (a 32-element part's values) — equals what it reads
// from the Q6_K block (QW6::load) and engine/quant's dequantization.
func TestRelayQ6KHost(t *testing.T) {
	t.Parallel()
	const rows, cols = 3, 768 // 9 blocks: every pad, some twice
	data, deq := randMatrix(quant.Q6_K, rows, cols, 5)
	for _, addr := range []uint64{0, 2, 6, 14, 0x7f0000000102} {
		t.Run(fmt.Sprintf("addr=%#x", addr), func(t *testing.T) {
			rel := make([]byte, len(data))
			back := make([]byte, len(data))
			if err := RelayQ6KHost(rel, data, addr); err != nil {
				t.Fatal(err)
			}
			unrelayQ6K(back, rel, addr)
			if !bytes.Equal(back, data) {
				t.Fatal("relay then unrelay changed the bytes")
			}
			for blk := 0; blk < len(data)/q6kaBlock; blk++ {
				o := blk * q6kaBlock
				orig, b := data[o:o+q6kaBlock], rel[o:o+q6kaBlock]
				p := q6kaPad(addr + uint64(o))
				for u := 0; u < 4; u++ {
					if got, want := q6kaUnitWords(t, b, addr+uint64(o), p, u), q6kUnitWords(orig, u); got != want {
						t.Fatalf("block %d unit %d: re-laid words %v, Q6_K's %v", blk, u, got, want)
					}
				}
				for part := 0; part < 8; part++ {
					got := q6kaPartRef(b, p, part)
					n, qq := part>>2, part&3
					for j := 0; j < 32; j++ {
						want := deq[blk*256+128*n+32*qq+j]
						if got[j] != want {
							t.Fatalf("block %d part %d element %d: %v, quant %v", blk, part, j, got[j], want)
						}
					}
				}
			}
		})
	}
	for _, tc := range []struct {
		name     string
		dst, src int
		addr     uint64
	}{{"short dst", 209, 210, 0}, {"partial block", 200, 200, 0}, {"odd address", 210, 210, 3}} {
		if err := RelayQ6KHost(make([]byte, tc.dst), make([]byte, tc.src), tc.addr); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// unrelayQ6K is RelayQ6KHost's inverse: the re-laid blocks of src, for a
// device address addr of src[0], back to Q6_K in dst.
func unrelayQ6K(dst, src []byte, addr uint64) {
	for o := 0; o < len(src); o += q6kaBlock {
		q6kaPerm(q6kaPad(addr+uint64(o)), func(q6k, q6ka int) { dst[o+q6k] = src[o+q6ka] })
	}
}

// q6Words is a Q6_K unit's operands in the integer GEMV (QW6's fields).
type q6Words struct {
	a, c, hb [4]uint32
	sc       uint32
	d        uint16
}

func words4(b []byte) (w [4]uint32) {
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// q6kUnitWords is QW6::load on a Q6_K block.
func q6kUnitWords(b []byte, u int) q6Words {
	n, h := (u>>1)&1, u&1
	var sc uint32
	for qq := 0; qq < 4; qq++ {
		sc |= uint32(b[192+8*n+2*qq+h]) << (8 * qq)
	}
	return q6Words{words4(b[64*n+16*h:]), words4(b[64*n+32+16*h:]), words4(b[128+32*n+16*h:]), sc,
		binary.LittleEndian.Uint16(b[208:])}
}

// q6kaD is common.cuh's q6ka_d (the bits).
func q6kaD(b []byte, p int) uint16 {
	if p&2 != 0 {
		return binary.LittleEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b[208:])
}

// q6kaUnitWords is QW6::load_a (and DQ6KA::load) on a re-laid block: the
// scale word through q6ka_scales, which must be 4-byte aligned.
func q6kaUnitWords(t *testing.T, b []byte, addr uint64, p, u int) q6Words {
	k := u & 3
	q := b[p+48*k:]
	si := q6kaMisc(p, p&2+4*k)
	if (addr+uint64(si))%4 != 0 {
		t.Fatalf("pad %d unit %d: scale word at %#x, not 4-byte aligned", p, k, addr+uint64(si))
	}
	return q6Words{words4(q), words4(q[16:]), words4(q[32:]), binary.LittleEndian.Uint32(b[si:]), q6kaD(b, p)}
}

// q6kaPartRef is Part<T_Q6_KA>::load and get4 on a re-laid block.
func q6kaPartRef(b []byte, p, t int) (out [32]float32) {
	n, qq := t>>2, t&3
	d := quant.F16ToF32(q6kaD(b, p))
	for hh := 0; hh < 2; hh++ {
		unit := b[p+48*(2*n+hh):]
		lo, hi := unit[16*(qq&1):], unit[32:]
		a := d * float32(int8(b[q6kaMisc(p, p&2+4*(2*n+hh)+qq)]))
		for j := 0; j < 16; j++ {
			q := (lo[j]>>(4*(qq>>1)))&0xF | (hi[j]>>(2*qq))&3<<4
			out[16*hh+j] = a * float32(int(q)-32)
		}
	}
	return out
}

// TestQ6KA runs every kernel family that reads weights on a Q6_K matrix
// re-laid on the device (RelayQ6K), against the CPU reference of the
// Q6_K bytes it came from: the device re-lay byte for byte against
// RelayQ6KHost, GEMV on the float path for 1-8 vectors (tiled) and fused
// (gemv_fused's DQ6KA, one and two vectors), GEMM and embedding lookup.
// The integer GEMVs on it are in TestGEMVQ (relay variants).
func TestQ6KA(t *testing.T) {
	t.Parallel()
	_, _ = gpu(t)
	const rows, cols = 67, 3584 + 512 // 16 blocks a row
	data, deq := randMatrix(quant.Q6_K, rows, cols, 41)
	r := rand.New(rand.NewPCG(4, 1))
	const mBig = 300 // GEMM through the f16 dequantizer (gemmF16) as well as on the fly
	xs := randVec(r, mBig*cols, 1)
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		k = tuned(k, func(tu *Tuning) { tu.IntegerGEMV = false })
		w := Matrix{Type: quant.Q6_K, Rows: rows, Cols: cols, Ptr: put(a, data)}
		wa, err := k.RelayQ6K(c, 0, w)
		must(err)
		if wa.Type != quant.Q6KA {
			failOnDevice("RelayQ6K returned a %v matrix", wa.Type)
		}
		want := make([]byte, len(data))
		must(RelayQ6KHost(want, data, uint64(w.Ptr)))
		if got := get[byte](a, wa.Ptr, len(data)); !bytes.Equal(got, want) {
			failOnDevice("device re-lay differs from RelayQ6KHost")
		}
		if _, err := k.RelayQ6K(c, 0, wa); err == nil {
			failOnDevice("RelayQ6K took a Q6KA matrix")
		}
		checkRows := func(what string, got []float32, nb int) {
			for b := 0; b < nb; b++ {
				for i := 0; i < rows; i++ {
					ref, mag := refDot(deq, cols, i, xs[b*cols:])
					if e := math.Abs(float64(got[b*rows+i]) - ref); !(e <= gemvTol(mag)) {
						failOnDevice("%s nb %d: y[%d][%d] = %v, float64 ref %v (err %.3g)", what, nb, b, i, got[b*rows+i], ref, e)
					}
				}
			}
		}
		x := put(a, xs)
		y := a.alloc(int64(mBig * rows * 4))
		for _, nb := range []int{1, 2, 3, 8} {
			poison(a, y, 8*rows)
			must(k.GEMV(c, 0, wa, x, y, nb))
			checkRows("gemv", get[float32](a, y, nb*rows), nb)
		}
		for nb := 1; nb <= MaxFusedGEMVBatch; nb++ {
			if !k.CanFuseGEMV(nb, wa) {
				failOnDevice("CanFuseGEMV refused a Q6KA matrix")
			}
			poison(a, y, 8*rows)
			must(k.GEMVFused(c, 0, x, nb, GEMVOut{W: wa, Y: y}))
			checkRows("gemv fused", get[float32](a, y, nb*rows), nb)
		}
		// GEMM: TestGEMM's tolerance (f16 operands).
		for _, m := range []int{17, mBig} {
			poison(a, y, m*rows)
			must(k.GEMM(c, 0, wa, x, y, m))
			got := get[float32](a, y, m*rows)
			for i := 0; i < m; i++ {
				for n := 0; n < rows; n++ {
					ref, mag := refDot(deq, cols, n, xs[i*cols:])
					if e := math.Abs(float64(got[i*rows+n]) - ref); !(e <= 2e-3*mag+1e-6) {
						failOnDevice("gemm m %d: y[%d][%d] = %v, ref %v (err %.3g)", m, i, n, got[i*rows+n], ref, e)
					}
				}
			}
		}
		ids := []int32{0, 66, 17, 17}
		out := a.alloc(int64(len(ids) * cols * 4))
		poison(a, out, len(ids)*cols)
		must(k.Embed(c, 0, wa, put(a, ids), len(ids), out, 1))
		emb := get[float32](a, out, len(ids)*cols)
		for i, id := range ids { // TestEmbed's tolerance
			for j := 0; j < cols; j++ {
				if g, w := float64(emb[i*cols+j]), float64(deq[int(id)*cols+j]); !(math.Abs(g-w) <= 1e-6*max(math.Abs(w), 1e-4)) {
					failOnDevice("embed: row %d element %d = %v, want %v", id, j, g, w)
				}
			}
		}
	})
}
