package quant

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// cpuMeter adds throughput per CPU-second to a benchmark's wall-clock
// figures: the development machine is shared, so wall time alone mostly
// measures the neighbours. Single-goroutine benchmarks lock to their thread
// and read its CPU clock; parallel ones read the process clock, giving
// throughput per core.
type cpuMeter struct {
	b     *testing.B
	proc  bool
	start time.Duration
	ok    bool
}

func startCPU(b *testing.B, proc bool) *cpuMeter {
	m := &cpuMeter{b: b, proc: proc}
	if !proc {
		runtime.LockOSThread()
	}
	b.ResetTimer()
	m.start, m.ok = m.now()
	return m
}

func (m *cpuMeter) now() (time.Duration, bool) {
	if m.proc {
		return processCPU()
	}
	return threadCPU()
}

// stop reports MB/cpu-s for bytesPerOp and, when elemsPerOp > 0,
// Gelem/cpu-s.
func (m *cpuMeter) stop(bytesPerOp, elemsPerOp float64) {
	end, ok := m.now()
	m.b.StopTimer()
	if !m.proc {
		runtime.UnlockOSThread()
	}
	if !m.ok || !ok || end <= m.start {
		return
	}
	sec := (end - m.start).Seconds()
	n := float64(m.b.N)
	m.b.ReportMetric(n*bytesPerOp/sec/1e6, "MB/cpu-s")
	if elemsPerOp > 0 {
		m.b.ReportMetric(n*elemsPerOp/sec/1e9, "Gelem/cpu-s")
	}
}

// benchRows/benchCols shape the matrix the Dot benchmarks stream through:
// 4096-element rows (an 8B model's hidden size), enough rows that the
// encoded matrix (1-16 MiB) does not sit in L1/L2.
const (
	benchCols = 4096
	benchRows = 1024
)

func benchMatrix(b *testing.B, t Type, rows, cols int) []byte {
	b.Helper()
	rb, err := t.RowBytes(int64(cols))
	if err != nil {
		b.Fatal(err)
	}
	m := make([]byte, int(rb)*rows)
	for r := 0; r < rows; r++ {
		if err := FillRandom(t, m[r*int(rb):(r+1)*int(rb)], uint64(r), 0.02); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

func benchVec(n int, seed uint64) []float32 {
	x := make([]float32, n)
	rng := wyrand(seed)
	for i := range x {
		x[i] = float32(int64(rng.next()>>40)-(1<<23)) / (1 << 23)
	}
	return x
}

// BenchmarkDot measures the matrix-vector product (DotRows) per type:
// MB/s is encoded weights streamed, Gelem/cpu-s multiply-adds per
// CPU-second.
func BenchmarkDot(b *testing.B) {
	for _, t := range Types() {
		b.Run(t.String(), func(b *testing.B) {
			m := benchMatrix(b, t, benchRows, benchCols)
			x := benchVec(benchCols, 1)
			y := make([]float32, benchRows)
			b.SetBytes(int64(len(m)))
			cm := startCPU(b, false)
			for i := 0; i < b.N; i++ {
				if err := DotRows(t, m, benchCols, x, y); err != nil {
					b.Fatal(err)
				}
			}
			cm.stop(float64(len(m)), benchRows*benchCols)
		})
	}
}

// BenchmarkDotRowsBatch measures the batched product with 8 vectors; the
// Gelem/cpu-s metric counts multiply-adds (rows*cols*vectors).
func BenchmarkDotRowsBatch(b *testing.B) {
	const nv = 8
	for _, t := range Types() {
		b.Run(fmt.Sprintf("%v/x%d", t, nv), func(b *testing.B) {
			m := benchMatrix(b, t, benchRows/4, benchCols)
			xs := make([][]float32, nv)
			ys := make([][]float32, nv)
			for j := range xs {
				xs[j] = benchVec(benchCols, uint64(j))
				ys[j] = make([]float32, benchRows/4)
			}
			b.SetBytes(int64(len(m)))
			cm := startCPU(b, false)
			for i := 0; i < b.N; i++ {
				if err := DotRowsBatch(t, m, benchCols, xs, ys); err != nil {
					b.Fatal(err)
				}
			}
			cm.stop(float64(len(m)), benchRows/4*benchCols*nv)
		})
	}
}

// BenchmarkFillRandom measures single-goroutine synthetic weight generation
// (bytes/s = encoded output).
func BenchmarkFillRandom(b *testing.B) {
	for _, t := range Types() {
		b.Run(t.String(), func(b *testing.B) {
			n := 4 << 20
			if t != INT8Row {
				n -= n % t.BlockBytes()
			}
			dst := make([]byte, n)
			b.SetBytes(int64(n))
			cm := startCPU(b, false)
			for i := 0; i < b.N; i++ {
				if err := FillRandom(t, dst, uint64(i), 0.02); err != nil {
					b.Fatal(err)
				}
			}
			cm.stop(float64(n), 0)
		})
	}
}

// BenchmarkFillRandomParallel is FillRandom over GOMAXPROCS goroutines
// (MB/cpu-s is then per core).
func BenchmarkFillRandomParallel(b *testing.B) {
	for _, t := range []Type{F16, Q8_0, Q4_K, Q6_K} {
		b.Run(t.String(), func(b *testing.B) {
			n := 32 << 20
			n -= n % t.BlockBytes()
			dst := make([]byte, n)
			b.SetBytes(int64(n))
			cm := startCPU(b, true)
			for i := 0; i < b.N; i++ {
				if err := FillRandomParallel(t, dst, uint64(i), 0.02); err != nil {
					b.Fatal(err)
				}
			}
			cm.stop(float64(n), 0)
		})
	}
}

// BenchmarkQuantize measures encoding speed (bytes/s = float32 input).
func BenchmarkQuantize(b *testing.B) {
	for _, t := range Types() {
		if !hasQuantizer(t) {
			continue
		}
		b.Run(t.String(), func(b *testing.B) {
			const n = 64 * QK_K
			x := benchVec(n, 3)
			rb, _ := t.RowBytes(n)
			dst := make([]byte, rb)
			b.SetBytes(4 * n)
			cm := startCPU(b, false)
			for i := 0; i < b.N; i++ {
				if err := Quantize(t, x, dst); err != nil {
					b.Fatal(err)
				}
			}
			cm.stop(4*n, n)
		})
	}
}
