package gemv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostcpu"
)

// TestPoolMatchesRows: every thread count (more than GOMAXPROCS too, where
// workers sleep between products), row counts that split unevenly or
// leave threads nothing, polling and sleeping workers, pinned and not;
// each product must equal Rows' bit for bit.
func TestPoolMatchesRows(t *testing.T) {
	t.Parallel()
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		t.Fatal(err)
	}
	const n = 512
	types := []quant.Type{quant.Q4_K, quant.Q6_K, quant.INT8Row, quant.BF16}
	for _, tc := range []struct {
		threads int
		pinned  bool
		spin    time.Duration
	}{
		{1, false, 0},
		{2, false, 0},
		{3, false, time.Microsecond},
		{5, false, -1},
		{8, false, 0},
		{min(2, len(cpus)), true, 0},
		{len(cpus), true, -1},
	} {
		o := PoolOptions{Threads: tc.threads, Spin: tc.spin}
		if tc.pinned {
			o.CPUs = cpus[:tc.threads]
		}
		t.Run(fmt.Sprintf("%d threads pinned %v spin %v", tc.threads, tc.pinned, tc.spin), func(t *testing.T) {
			t.Parallel()
			p, err := NewPool(o)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Error(err)
				}
			}()
			if p.Threads() != tc.threads {
				t.Fatalf("Threads() = %d", p.Threads())
			}
			for _, typ := range types {
				for _, rows := range []int{0, 1, 15, 16, 17, 100, 257} {
					w := randomRows(t, typ, rows, n, uint64(rows), false)
					var x X
					if err := x.Set(randomVector(n, uint64(rows)+1, false)); err != nil {
						t.Fatal(err)
					}
					for _, impl := range Impls() {
						want := make([]float32, rows)
						if err := Rows(impl, typ, w, n, &x, want); err != nil {
							t.Fatal(err)
						}
						got := make([]float32, rows)
						for i := range got {
							got[i] = -1
						}
						if err := p.Rows(impl, typ, w, n, &x, got); err != nil {
							t.Fatal(err)
						}
						for i := range want {
							if !sameBits(got[i], want[i]) {
								t.Fatalf("%v %v, %d rows: row %d = %g, want %g", typ, impl, rows, i, got[i], want[i])
							}
						}
						if tc.spin == time.Microsecond {
							time.Sleep(50 * time.Microsecond) // let the workers fall asleep
						}
					}
				}
			}
		})
	}
}

func TestPoolRowsBatch(t *testing.T) {
	t.Parallel()
	const rows, n = 70, 512
	w := randomRows(t, quant.Q5_K, rows, n, 3, false)
	p, err := NewPool(PoolOptions{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, vectors := range []int{1, 4, 2} {
		xs := make([]*X, vectors)
		ys := make([][]float32, vectors)
		want := make([][]float32, vectors)
		for j := range xs {
			xs[j] = new(X)
			if err := xs[j].Set(randomVector(n, uint64(j+vectors), false)); err != nil {
				t.Fatal(err)
			}
			ys[j] = make([]float32, rows)
			want[j] = make([]float32, rows)
		}
		if err := RowsBatch(Detect(), quant.Q5_K, w, n, xs, want); err != nil {
			t.Fatal(err)
		}
		if err := p.RowsBatch(Detect(), quant.Q5_K, w, n, xs, ys); err != nil {
			t.Fatal(err)
		}
		for j := range ys {
			for i := range ys[j] {
				if !sameBits(ys[j][i], want[j][i]) {
					t.Fatalf("%d vectors: vector %d row %d = %g, want %g", vectors, j, i, ys[j][i], want[j][i])
				}
			}
		}
	}
	if err := p.RowsBatch(Detect(), quant.Q5_K, w, n, nil, nil); err != nil {
		t.Errorf("no vectors: %v", err)
	}
}

func TestPoolErrors(t *testing.T) {
	t.Parallel()
	var x X
	if err := x.Set(make([]float32, 256)); err != nil {
		t.Fatal(err)
	}
	p, err := NewPool(PoolOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	y := make([]float32, 2)
	for _, tc := range badShapes {
		if err := p.Rows(Detect(), tc.typ, tc.rows, tc.n, &x, y); err == nil {
			t.Errorf("Rows, %s: no error", tc.name)
		}
		if err := p.RowsBatch(Detect(), tc.typ, tc.rows, tc.n, []*X{&x}, [][]float32{y}); err == nil {
			t.Errorf("RowsBatch, %s: no error", tc.name)
		}
	}
	if err := p.RowsBatch(Detect(), quant.Q4_K, make([]byte, 288), 256, []*X{&x, &x}, [][]float32{y, y[:1]}); err == nil {
		t.Error("RowsBatch, ragged outputs: no error")
	}
	if err := p.RowsBatch(Detect(), quant.Q4_K, make([]byte, 288), 256, []*X{&x}, [][]float32{y, y}); err == nil {
		t.Error("RowsBatch, more outputs than vectors: no error")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Rows(Detect(), quant.Q4_K, make([]byte, 288), 256, &x, y); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Rows after Close: %v", err)
	}
	for _, o := range []PoolOptions{{Threads: -1}, {Threads: 2, CPUs: []int{0}}, {CPUs: []int{0, -5}}} {
		if p, err := NewPool(o); err == nil {
			p.Close()
			t.Errorf("NewPool(%+v): no error", o)
		}
	}
}

// TestPoolConcurrentCallers: products from several goroutines at once run
// one at a time and each gets its own result.
func TestPoolConcurrentCallers(t *testing.T) {
	t.Parallel()
	const rows, n = 64, 256
	w := randomRows(t, quant.Q8_0, rows, n, 5, false)
	p, err := NewPool(PoolOptions{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var x X
			if err := x.Set(randomVector(n, uint64(g), false)); err != nil {
				t.Error(err)
				return
			}
			want := make([]float32, rows)
			if err := Rows(Detect(), quant.Q8_0, w, n, &x, want); err != nil {
				t.Error(err)
				return
			}
			got := make([]float32, rows)
			for range 50 {
				if err := p.Rows(Detect(), quant.Q8_0, w, n, &x, got); err != nil {
					t.Error(err)
					return
				}
				for i := range got {
					if !sameBits(got[i], want[i]) {
						t.Errorf("caller %d row %d: %g, want %g", g, i, got[i], want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestPoolAllocatesNothing(t *testing.T) {
	const rows, n = 256, 1024
	w := randomRows(t, quant.Q4_K, rows, n, 1, false)
	var x X
	if err := x.Set(randomVector(n, 1, false)); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, rows)
	impl := Detect() // Impls allocates its list
	xs, ys := []*X{&x, &x}, [][]float32{y, make([]float32, rows)}
	p, err := NewPool(PoolOptions{Threads: min(2, runtime.GOMAXPROCS(0))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.RowsBatch(impl, quant.Q4_K, w, n, xs, ys); err != nil { // grows the scratch once
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(50, func() { _ = p.Rows(impl, quant.Q4_K, w, n, &x, y) }); a != 0 {
		t.Errorf("Rows: %v allocations a call", a)
	}
	if a := testing.AllocsPerRun(50, func() { _ = p.RowsBatch(impl, quant.Q4_K, w, n, xs, ys) }); a != 0 {
		t.Errorf("RowsBatch: %v allocations a call", a)
	}
}

// BenchmarkPoolRows: a 14336 x 4096 Q4_K matrix (an 8B model's FFN up
// projection) on 1, 2, 4, ... GOMAXPROCS pinned threads, as MB/s of
// weight bytes, with workers that poll between products and with workers
// that sleep. The matrix fits no L3, but one matrix read again and again
// may partly stay cached: internal/bench/cpubench cycles through many.
func BenchmarkPoolRows(b *testing.B) {
	const rows, n = 14336, 4096
	t := &testing.T{}
	w := randomRows(t, quant.Q4_K, rows, n, 1, false)
	var x X
	if err := x.Set(randomVector(n, 2, false)); err != nil {
		b.Fatal(err)
	}
	y := make([]float32, rows)
	impl := Detect()
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		b.Fatal(err)
	}
	cpus = cpus[:min(len(cpus), runtime.GOMAXPROCS(0))]
	for threads := 1; ; threads = min(2*threads, len(cpus)) {
		for _, spin := range []time.Duration{0, -1} {
			name := fmt.Sprintf("threads=%d/poll", threads)
			if spin < 0 {
				name = fmt.Sprintf("threads=%d/sleep", threads)
			}
			b.Run(name, func(b *testing.B) {
				restore, err := hostcpu.Pin(cpus[0])
				if err != nil {
					b.Fatal(err)
				}
				defer restore()
				p, err := NewPool(PoolOptions{CPUs: cpus[:threads], Spin: spin})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					if err := p.Rows(impl, quant.Q4_K, w, n, &x, y); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		if threads == len(cpus) {
			break
		}
	}
}
