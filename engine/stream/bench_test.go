package stream_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/streamtest"
)

// benchDir is where throughput benchmarks put their files: a real disk,
// since /tmp may be tmpfs (STRATA_BENCH_DIR overrides /var/tmp).
func benchDir() string {
	if d := os.Getenv("STRATA_BENCH_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

var (
	benchFileOnce sync.Once
	benchFile     string
	benchFileErr  error
)

// benchFileSize is the size of the throughput benchmark's file (512 MiB,
// STRATA_BENCH_FILE_MB overrides): larger than the drive's cache tends to
// matter, small enough to write quickly.
func benchFileSize() int64 {
	if s := os.Getenv("STRATA_BENCH_FILE_MB"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return int64(n) << 20
		}
	}
	return 512 << 20
}

// getBenchFile writes (once) a file of pseudo-random bytes.
func getBenchFile(b *testing.B) string {
	benchFileOnce.Do(func() {
		benchFile = filepath.Join(benchDir(), fmt.Sprintf("strata-stream-bench-%d.bin", benchFileSize()))
		if st, err := os.Stat(benchFile); err == nil && st.Size() == benchFileSize() {
			return
		}
		f, err := os.Create(benchFile)
		if err != nil {
			benchFileErr = err
			return
		}
		buf := make([]byte, 4<<20)
		for i := range buf {
			buf[i] = byte(i*2654435761>>13) ^ byte(i)
		}
		for n := int64(0); n < benchFileSize(); n += int64(len(buf)) {
			buf[0]++
			if _, err := f.Write(buf); err != nil {
				benchFileErr = err
				break
			}
		}
		if err := f.Close(); err != nil && benchFileErr == nil {
			benchFileErr = err
		}
	})
	if benchFileErr != nil {
		b.Skipf("cannot write the benchmark file in %s: %v", benchDir(), benchFileErr)
	}
	return benchFile
}

var ddRate = regexp.MustCompile(`copied, ([0-9.]+) s`)

// ddMBps runs `dd if=path of=/dev/null iflag=direct bs=4M` and returns its
// rate in MB/s (10^6 bytes).
func ddMBps(b *testing.B, path string, size int64) float64 {
	out, err := exec.Command("dd", "if="+path, "of=/dev/null", "iflag=direct", "bs=4M").CombinedOutput()
	if err != nil {
		b.Logf("dd failed (%v): %s", err, out)
		return 0
	}
	m := ddRate.FindSubmatch(out)
	if m == nil {
		b.Logf("cannot parse dd output: %s", out)
		return 0
	}
	secs, _ := strconv.ParseFloat(string(m[1]), 64)
	return float64(size) / secs / 1e6
}

// BenchmarkFileSource reads the whole benchmark file per iteration with
// several chunk sizes and queue depths and reports the ratio to dd with
// O_DIRECT and 4 MiB blocks on the same file (dd is run after each
// configuration, so both see the same drive state; the median of three dd
// runs is used).
func BenchmarkFileSource(b *testing.B) {
	path := getBenchFile(b)
	size := benchFileSize()
	for _, cfg := range []stream.FileOptions{
		{ChunkBytes: 4 << 20, QueueDepth: 1},
		{ChunkBytes: 1 << 20, QueueDepth: 8},
		{ChunkBytes: 2 << 20, QueueDepth: 8},
		{ChunkBytes: 4 << 20, QueueDepth: 4},
		{ChunkBytes: 4 << 20, QueueDepth: 16},
	} {
		b.Run(fmt.Sprintf("chunk%dMiB/qd%d", cfg.ChunkBytes>>20, cfg.QueueDepth), func(b *testing.B) {
			s, err := stream.OpenFile(path, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if !s.Direct() {
				b.Logf("O_DIRECT refused in %s: buffered reads", benchDir())
			}
			const extent = 64 << 20 // read in pipeline-sized extents
			buf, err := s.Alloc(extent)
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Free()
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				for off := int64(0); off < size; off += extent {
					n := min(extent, size-off)
					if err := s.ReadAt(context.Background(), buf.Bytes()[:n], off); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			ours := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e6
			// dd's rate on this virtual disk varies run to run; take the
			// median of three.
			var dds []float64
			for range 3 {
				if r := ddMBps(b, path, size); r > 0 {
					dds = append(dds, r)
				}
			}
			slices.Sort(dds)
			if len(dds) > 0 {
				dd := dds[len(dds)/2]
				b.ReportMetric(dd, "dd_MB/s")
				b.ReportMetric(ours/dd, "ratio_to_dd")
			}
		})
	}
}

// benchModel returns the model and store the pipeline benchmarks use:
// the tiny llama (q4_k_m, 6 layers) and, with STRATA_BENCH_8B set to a
// prefab pool, that pool, or to a GGUF, that model with its layers written
// to a flat store in benchDir.
func benchModels(b *testing.B) map[string]*testModel {
	out := map[string]*testModel{"tiny": getModel(b, "llama", "q4_k_m", []uint64{1, 2, 3})}
	if path := os.Getenv("STRATA_BENCH_8B"); path != "" {
		modelsMu.Lock()
		tm, ok := models[path]
		if isPool, _ := prefab.IsPool(path); !ok && isPool {
			pool, err := prefab.OpenPool(path)
			if err != nil {
				modelsMu.Unlock()
				b.Fatal(err)
			}
			m, err := pool.Model()
			if err != nil {
				modelsMu.Unlock()
				b.Fatal(err)
			}
			tm = &testModel{m: m, store: pool, path: path}
			models[path], ok = tm, true
		}
		if !ok {
			m, err := model.Open(path)
			if err != nil {
				modelsMu.Unlock()
				b.Fatal(err)
			}
			st, err := streamtest.Write(filepath.Join(benchDir(), "strata-stream-bench-8b.store"), m.Weights)
			if err != nil {
				modelsMu.Unlock()
				b.Fatal(err)
			}
			tm = &testModel{m: m, store: st, path: st.Path()}
			models[path] = tm
		}
		modelsMu.Unlock()
		out["8b"] = tm
	}
	return out
}

// BenchmarkDecode times single-sequence decode passes: resident weights
// against the pipeline with every layer on tier B and on tier C (O_DIRECT
// file source), reporting tokens/s and the overlap ratio.
func BenchmarkDecode(b *testing.B) {
	for _, name := range []string{"tiny", "8b"} {
		tm, ok := benchModels(b)[name]
		if !ok {
			continue
		}
		for _, mix := range []string{"resident", "all-B", "all-C", "mixed"} {
			b.Run(name+"/"+mix, func(b *testing.B) {
				m := tm.m
				fwd := func(s []model.Step) error { return m.Forward(context.Background(), s) }
				var p *stream.Pipeline
				if mix != "resident" {
					src, err := stream.OpenFile(tm.path, stream.FileOptions{})
					if err != nil {
						b.Fatal(err)
					}
					defer src.Close()
					tiers, _ := tier.MixTiers(mix, m.Config.Layers)
					p, err = stream.New(stream.Options{Store: tm.store, Tiers: tiers, Depth: 2, Source: src})
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					fwd = func(s []model.Step) error { return p.Forward(context.Background(), m, s) }
				} else {
					m.SetLayerSource(nil)
				}
				seq := m.NewSequence(0)
				step := []model.Step{{Seq: seq, Tokens: []int32{1}}}
				if err := fwd(step); err != nil { // warm-up: verification, page faults
					b.Fatal(err)
				}
				if p != nil {
					p.ResetStats()
				}
				b.ResetTimer()
				for i := range b.N {
					if seq.Pos() >= seq.MaxContext()-1 {
						seq.Reset()
					}
					step[0].Tokens[0] = int32(i % m.Config.Vocab)
					if err := fwd(step); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
				if p != nil {
					st := p.Stats()
					b.ReportMetric(st.Overlap, "overlap")
					b.ReportMetric(st.ComputeUtil, "compute_util")
					if st.Read.Bytes > 0 {
						b.ReportMetric(st.Read.GBps, "read_GB/s")
					}
					b.ReportMetric(st.Copy.GBps, "copy_GB/s")
				}
			})
		}
	}
}
