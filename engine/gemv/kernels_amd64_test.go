package gemv

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// TestAVX512Variants: both builds of the AVX512 family's kernels, with and
// without VNNI, meet the contract. The dispatch table holds only the one
// this CPU prefers, so TestKernelsMatchReference alone would leave the
// other untested on a VNNI machine.
func TestAVX512Variants(t *testing.T) {
	t.Parallel()
	if !available(AVX512) {
		t.Skip("CPU without AVX-512 F/BW/VL")
	}
	for _, vnni := range []bool{false, true} {
		if vnni && !cpu.X86.HasAVX512VNNI {
			continue
		}
		for typ, k := range avx512Kernels(vnni) {
			matchReference(t, fmt.Sprintf("vnni=%v", vnni), typ, func(w []byte, n int, x *X, y []float32) error {
				k(unsafe.SliceData(w), len(w)/len(y), len(y), n, unsafe.SliceData(x.Q), unsafe.SliceData(x.D), unsafe.SliceData(x.S), unsafe.SliceData(x.F), unsafe.SliceData(y))
				return nil
			})
		}
	}
}

// TestAVX512Variants4: both builds of the multi-vector kernels give, for
// each of four packed vectors, the bits of the reference (the K-quants)
// or of the one-vector kernel (the float formats, whose reference is a
// tolerance), over rows of an odd and an even number of blocks, and for
// the float formats rows that end in a part of a chunk.
func TestAVX512Variants4(t *testing.T) {
	t.Parallel()
	if !available(AVX512) {
		t.Skip("CPU without AVX-512 F/BW/VL")
	}
	for _, vnni := range []bool{false, true} {
		if vnni && !cpu.X86.HasAVX512VNNI {
			continue
		}
		for typ, k := range avx512Kernels4(vnni) {
			ns := []int{256, 768, 1024}
			if packBlock(typ) < Block {
				ns = append(ns, 16, 272, 496)
			}
			for _, n := range ns {
				for _, wild := range []bool{false, true} {
					const rows = 19
					w := randomRows(t, typ, rows, n, uint64(n), wild)
					xs := make([]*X, Group)
					for j := range xs {
						xs[j] = new(X)
						if err := xs[j].Set(randomVector(n, uint64(3*j+n), wild)); err != nil {
							t.Fatal(err)
						}
					}
					var p Packed
					if err := p.Pack(xs); err != nil {
						t.Fatal(err)
					}
					got := make([]float32, rows*Group)
					k(unsafe.SliceData(w), len(w)/rows, rows, n, &p.q[0], &p.d[0], &p.s[0], (*float32)(unsafe.Pointer(&p.fs[0])), &got[0])
					want := make([]float32, rows)
					for j, x := range xs {
						if one := avx512Kernels(vnni)[typ]; packBlock(typ) < Block {
							one(unsafe.SliceData(w), len(w)/rows, rows, n, unsafe.SliceData(x.Q), unsafe.SliceData(x.D), unsafe.SliceData(x.S), unsafe.SliceData(x.F), unsafe.SliceData(want))
						} else if err := Rows(Go, typ, w, n, x, want); err != nil {
							t.Fatal(err)
						}
						for r := range want {
							if !sameBits(got[r*Group+j], want[r]) {
								t.Fatalf("%v vnni=%v n=%d wild=%v: vector %d row %d: %g, reference %g", typ, vnni, n, wild, j, r, got[r*Group+j], want[r])
							}
						}
					}
				}
			}
		}
	}
}
