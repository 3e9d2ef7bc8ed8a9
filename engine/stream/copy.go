package stream

import (
	"runtime"
	"sync"

	"github.com/strata-llm/strata/internal/hostmem"
)

// copyPiece is the smallest share of a parallel copy one goroutine takes:
// below it the goroutine hand-off costs more than the memmove.
const copyPiece = 1 << 20

// parallelCopy copies src into dst (len(dst) >= len(src)) with up to
// GOMAXPROCS goroutines, each moving a contiguous piece. One core rarely
// saturates memory bandwidth; a few together come close.
func parallelCopy(dst, src []byte) {
	n := len(src)
	w := min(runtime.GOMAXPROCS(0), n/copyPiece)
	if w <= 1 {
		copy(dst, src)
		return
	}
	per := hostmem.AlignUp((n+w-1)/w, 64)
	var wg sync.WaitGroup
	for p := per; p < n; p += per {
		e := min(p+per, n)
		wg.Add(1)
		go func(p, e int) {
			defer wg.Done()
			copy(dst[p:e], src[p:e])
		}(p, e)
	}
	copy(dst[:min(per, n)], src[:min(per, n)])
	wg.Wait()
}
