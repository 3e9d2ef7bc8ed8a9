package model

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestPoolRunsEveryItemOnce(t *testing.T) {
	t.Parallel()
	p := newPool(4)
	for _, n := range []int{0, 1, 3, 4, 5, 1000} {
		hits := make([]atomic.Int32, n)
		var busy [4]atomic.Int32
		p.run(n, func(w, i int) {
			if busy[w].Add(1) != 1 {
				t.Errorf("worker %d ran two items at once", w)
			}
			hits[i].Add(1)
			busy[w].Add(-1)
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n=%d: item %d ran %d times", n, i, h)
			}
		}
	}
}

// TestPoolConcurrentRuns starts steps from several goroutines at once (as
// separate models would); each must complete with all its items.
func TestPoolConcurrentRuns(t *testing.T) {
	t.Parallel()
	p := newPool(3)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 50; r++ {
				var sum atomic.Int64
				p.run(100, func(w, i int) { sum.Add(int64(i)) })
				if s := sum.Load(); s != 4950 {
					t.Errorf("sum %d, want 4950", s)
					return
				}
			}
		}()
	}
	wg.Wait()
}
