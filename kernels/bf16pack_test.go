package kernels

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// bf16PackCases are bf16 tensors for the decoder: synthetic weights (no
// escapes), random bit patterns (most values escape), every special value
// and block shapes that leave part of a warp idle. Tolerance: none, the
// decode must be bit-exact.
func bf16PackCases() []struct {
	name string
	src  []byte
} {
	rng := rand.New(rand.NewPCG(7, 8))
	fill := func(n int, std float32) []byte {
		b := make([]byte, 2*n)
		must(quant.FillRandomParallel(quant.BF16, b, 3, std))
		return b
	}
	random := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	mixed := fill(64*256, 0.02) // sparse escapes: zeros, Infs, NaNs, outliers
	for i := 0; i < len(mixed)/2; i += 1 + rng.IntN(300) {
		v := []uint16{0, 0x8000, 0x7f80, 0xffc1, 0x0001, 0x7f7f, 0x4b00}[rng.IntN(7)]
		binary.LittleEndian.PutUint16(mixed[2*i:], v)
	}
	every := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(every[2*i:], uint16(i))
	}
	return []struct {
		name string
		src  []byte
	}{
		{"one block", fill(256, 0.02)},
		{"3 blocks (half warp idle)", fill(3*256, 1)},
		{"synth 4096x1024", fill(4096*1024, 0.03)},
		{"synth 14336x4096", fill(14336*4096, 0.0083)},
		{"random bits", random(1000 * 256)},
		{"sparse specials", mixed},
		{"every bit pattern", every},
	}
}

func TestUnpackBF16(t *testing.T) {
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		for _, tc := range bf16PackCases() {
			l, err := quant.BF16PackedLayout(tc.src)
			must(err)
			blob := make([]byte, l.Size)
			_, err = quant.PackBF16(blob, tc.src)
			must(err)
			cpu := make([]byte, len(tc.src))
			must(quant.UnpackBF16(cpu, blob))
			if !bytes.Equal(cpu, tc.src) {
				t.Fatalf("%s: CPU decoder does not round-trip", tc.name)
			}
			src := put(a, blob)
			dst := a.alloc(int64(len(tc.src)))
			must(c.MemsetD8(dst, 0xee, int64(len(tc.src)), 0))
			must(k.UnpackBF16(c, 0, src, l.N, dst))
			got := get[byte](a, dst, len(tc.src))
			bad := 0
			for i := 0; i < len(got); i += 2 {
				if got[i] != cpu[i] || got[i+1] != cpu[i+1] {
					if bad < 3 {
						t.Errorf("%s: value %d: GPU %#04x, CPU %#04x", tc.name, i/2, binary.LittleEndian.Uint16(got[i:]), binary.LittleEndian.Uint16(cpu[i:]))
					}
					bad++
				}
			}
			t.Logf("%s: %d values, ratio %.4f, %d escapes, %d mismatches", tc.name, l.N, float64(l.Size)/float64(len(tc.src)), l.Escapes, bad)
		}
		// Bad arguments are refused on the host.
		for _, n := range []int64{0, 100, 257} {
			if err := k.UnpackBF16(c, 0, a.alloc(1024), n, a.alloc(1024)); err == nil {
				t.Errorf("n = %d: no error", n)
			}
		}
	})
}

// BenchmarkUnpackBF16 decodes the 8b's largest streamed matrix (14336x4096,
// 112 MiB out); reports output GB/s and (bytes read + written) ÷ the D2D
// copy's bandwidth.
func BenchmarkUnpackBF16(b *testing.B) {
	d2d := copyBandwidth(b)
	d, k := gpu(b)
	for _, tc := range []struct {
		name string
		std  float32
		rows int
	}{{"14336x4096", 0.0083, 14336}, {"4096x4096", 0.0156, 4096}} {
		b.Run(tc.name, func(b *testing.B) {
			src := make([]byte, 2*tc.rows*4096)
			must(quant.FillRandomParallel(quant.BF16, src, 1, tc.std))
			l, err := quant.BF16PackedLayout(src)
			must(err)
			blob := make([]byte, l.Size)
			_, err = quant.PackBF16(blob, src)
			must(err)
			var ms float64
			err = d.Do(func(c *cudadrv.Ctx) error {
				a := &arena{c: c}
				defer a.free()
				// Enough copies to cycle well past the L2.
				copies := max(1, int((512<<20)/int64(len(src)+len(blob))))
				var srcs, dsts []cudadrv.DevPtr
				for range copies {
					srcs = append(srcs, put(a, blob))
					dsts = append(dsts, a.alloc(int64(len(src))))
				}
				ms = timeIt(c, max(b.N, 50), func(i int) error { return k.UnpackBF16(c, 0, srcs[i%copies], l.N, dsts[i%copies]) })
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			out := float64(len(src)) / (ms / 1e3)
			moved := float64(len(src)+len(blob)) / (ms / 1e3)
			b.ReportMetric(ms*1e3, "us/decode")
			b.ReportMetric(out/1e9, "GB/s-out")
			b.ReportMetric(moved/d2d, "x-D2D")
			b.Logf("%s: %.1f us, %.0f GB/s of bf16 out, read+write %.0f GB/s = %.3f of D2D %.0f GB/s (ratio %.4f)",
				tc.name, ms*1e3, out/1e9, moved/1e9, moved/d2d, d2d/1e9, float64(l.Size)/float64(len(src)))
		})
	}
}
