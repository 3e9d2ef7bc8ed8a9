//go:build linux

package gemv

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// BenchmarkParallel: every core on one matrix of 1 GiB (far past any
// cache), each a static contiguous share of the rows, on plain and on
// transparent huge pages, against a plain read of the same memory by the
// same goroutines: what a model's GEMV gets of the host's DRAM.
func BenchmarkParallel(b *testing.B) {
	const n = 4096
	threads := runtime.GOMAXPROCS(0)
	for _, huge := range []bool{false, true} {
		for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K} {
			rb, _ := typ.RowBytes(n)
			rows := int((1 << 30) / rb)
			r, err := hostmem.Alloc(rows*int(rb), hostmem.AllocOptions{HugePages: huge})
			if err != nil {
				b.Fatal(err)
			}
			w := r.Bytes()
			if !huge {
				_ = unix.Madvise(w, unix.MADV_NOHUGEPAGE)
			}
			fillWild(typ, w, n)
			xs := make([]X, threads)
			ys := make([][]float32, threads)
			for t := range xs {
				if err := xs[t].Set(randomVector(n, uint64(t), false)); err != nil {
					b.Fatal(err)
				}
				ys[t] = make([]float32, rows/threads+1)
			}
			pages := map[bool]string{false: "4k", true: "thp"}[huge]
			b.Run(fmt.Sprintf("%v/%v/%s/gemv", Detect(), typ, pages), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					var wg sync.WaitGroup
					for t := 0; t < threads; t++ {
						r0, r1 := t*rows/threads, (t+1)*rows/threads
						wg.Go(func() {
							_ = Rows(Detect(), typ, w[int64(r0)*rb:int64(r1)*rb], n, &xs[t], ys[t][:r1-r0])
						})
					}
					wg.Wait()
				}
			})
			if typ == quant.Q4_K {
				b.Run(fmt.Sprintf("read/%s", pages), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					sums := make([]uint64, threads*8)
					for b.Loop() {
						var wg sync.WaitGroup
						for t := 0; t < threads; t++ {
							part := w[t*len(w)/threads/64*64 : (t+1)*len(w)/threads/64*64]
							wg.Go(func() { sums[t*8] = readSum(part) })
						}
						wg.Wait()
					}
				})
			}
			r.Free()
		}
	}
}

// readSum adds b's 64-bit words in eight independent chains.
func readSum(b []byte) uint64 {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(w); i += 8 {
		s0 += w[i]
		s1 += w[i+1]
		s2 += w[i+2]
		s3 += w[i+3]
		s4 += w[i+4]
		s5 += w[i+5]
		s6 += w[i+6]
		s7 += w[i+7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// fillWild fills w with random bytes whose block scales are small finite
// halves, in parallel.
func fillWild(typ quant.Type, w []byte, n int) {
	rb, _ := typ.RowBytes(int64(n))
	rows := len(w) / int(rb)
	var wg sync.WaitGroup
	threads := runtime.GOMAXPROCS(0)
	for t := 0; t < threads; t++ {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(t), 1))
			for row := t * rows / threads; row < (t+1)*rows/threads; row++ {
				rw := w[row*int(rb) : (row+1)*int(rb)]
				for i := 0; i+8 <= len(rw); i += 8 {
					*(*uint64)(unsafe.Pointer(&rw[i])) = r.Uint64()
				}
				h := quant.F32ToF16(0.001)
				for b := 0; b < n/Block; b++ {
					switch typ {
					case quant.Q4_K:
						rw[b*q4kBytes], rw[b*q4kBytes+1], rw[b*q4kBytes+2], rw[b*q4kBytes+3] = byte(h), byte(h>>8), byte(h), byte(h>>8)
					case quant.Q6_K:
						rw[b*q6kBytes+208], rw[b*q6kBytes+209] = byte(h), byte(h>>8)
					}
				}
			}
		})
	}
	wg.Wait()
}
