package cpubench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostcpu"
)

func firstCPU(t testing.TB) int {
	t.Helper()
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		t.Fatal(err)
	}
	return cpus[0]
}

// TestRun: a tiny run on every CPU, through the reference and the best
// kernels, renders and holds a finite, positive rate everywhere.
func TestRun(t *testing.T) {
	t.Parallel()
	for _, impl := range []string{"go", ""} {
		var lines []string
		r, err := Run(context.Background(), Options{ReadBytes: 4 << 20, WeightBytes: 1 << 20, Time: time.Millisecond, Impl: impl,
			Types: []quant.Type{quant.Q4_K, quant.INT8Row}, Progress: func(s string) { lines = append(lines, s) }})
		if err != nil {
			t.Fatal(err)
		}
		ok := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
		if len(r.Read.Points) != len(DefaultThreads(len(r.CPU.CPUs))) || !ok(r.Read.LoopCache) || len(r.GEMV)+len(r.Skipped) != 2 || len(lines) == 0 {
			t.Fatalf("%s: %+v", impl, r)
		}
		for _, g := range r.GEMV {
			for _, p := range g.Points {
				if !ok(p.Best) || !ok(p.Ratio) {
					t.Errorf("%s %s: %+v", impl, g.Type, p)
				}
			}
		}
		var b bytes.Buffer
		if err := r.WriteText(&b); err != nil || !strings.Contains(b.String(), "memory read") {
			t.Errorf("%s: %v\n%s", impl, err, b.String())
		}
	}
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Threads: []int{}},
		{Threads: []int{0}},
		{Threads: []int{1 << 20}},
		{Impl: "mmx"},
		{Time: -time.Second},
		{ReadBytes: 1 << 62},
		{ReadBytes: 100},
	} {
		if r, err := Run(context.Background(), o); !errors.Is(err, ErrBadOptions) || r != nil {
			t.Errorf("Run(%+v) = %v, %v", o, r, err)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{ReadBytes: 1 << 20, WeightBytes: 1 << 20, Threads: []int{1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
}

func TestParseTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []quant.Type
	}{
		{"all", Types},
		{"q4_k", []quant.Type{quant.Q4_K}},
		{"BF16, int8_row,Q4_K,bf16", []quant.Type{quant.BF16, quant.INT8Row, quant.Q4_K}},
	} {
		if got, err := ParseTypes(tc.in); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTypes(%q) = %v, %v", tc.in, got, err)
		}
	}
	for _, in := range []string{"", "f32", "q4_k,", "Q6KA"} {
		if _, err := ParseTypes(in); !errors.Is(err, ErrBadOptions) {
			t.Errorf("ParseTypes(%q): %v", in, err)
		}
	}
}

func TestDefaultThreads(t *testing.T) {
	t.Parallel()
	for n, want := range map[int][]int{1: {1}, 2: {1, 2}, 6: {1, 2, 4, 6}, 16: {1, 2, 4, 8, 16}} {
		if got := DefaultThreads(n); !slices.Equal(got, want) {
			t.Errorf("DefaultThreads(%d) = %v", n, got)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	b := make([]byte, 10*readStep+7)
	for _, n := range []int{1, 3, 10, 11} {
		parts := split(b, n)
		total := 0
		for _, p := range parts {
			if len(p)%readStep != 0 {
				t.Errorf("%d parts: a part of %d bytes", n, len(p))
			}
			total += len(p)
		}
		if len(parts) != n || total != 10*readStep {
			t.Errorf("%d parts: %d of %d bytes", n, len(parts), total)
		}
	}
}

func TestCacheSizes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"32768K": 32 << 20, "2M": 2 << 20, "1G": 1 << 30, "512": 512, "x": -1, "": -1} {
		if got := parseCacheSize(in); got != want {
			t.Errorf("parseCacheSize(%q) = %d", in, got)
		}
	}
	cpus, _, err := hostcpu.CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if c := lastLevelCache(cpus); c < 0 {
		t.Errorf("last-level cache %d", c)
	}
}
