package gpu

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// BenchmarkTierC8B: the 8b shape (Q4_K_M) with layers 16..31 on tier C,
// read every pass from a prefab pool into pinned staging and copied into
// k device slots. STRATA_8B_GGUF names the synthetic GGUF and
// STRATA_8B_POOL its pool (both written when missing); the pool is read
// through each source in turn:
//
//   - file: stream.FileSource, which on tmpfs (/dev/shm, where O_DIRECT
//     is refused) falls back to buffered preads: a memcpy from the page
//     cache on QueueDepth goroutines, standing in for a fast NVMe drive;
//   - file-qd16: the same with 16 reads in flight;
//   - mmap: stream.MmapSource (a parallel memcpy from the mapping);
//   - disk: FileSource with O_DIRECT on a copy of the pool at
//     STRATA_8B_DISK_POOL (set it to a path on a real disk), if set.
//
// For each it measures the source alone (the tier-C extents read in
// order into one staging buffer, as stage 1 does) and decode at batch 1,
// and reports time per token ÷ (tier-C bytes ÷ source GB/s alone): 1.0
// means the pipeline keeps its slowest link, storage, busy all the time.
// STRATA_TIERC_K lists the depths to try (default "2").
func BenchmarkTierC8B(b *testing.B) {
	gpath := bigModel(b, "STRATA_8B_GGUF", "8b")
	ppath := os.Getenv("STRATA_8B_POOL")
	if ppath == "" {
		b.Skip("skipping: STRATA_8B_POOL is not set (path of the 8b model's prefab pool, written there if missing)")
	}
	dev, _ := gpu(b)
	if _, err := os.Stat(ppath); errors.Is(err, os.ErrNotExist) {
		t0 := time.Now()
		writePool(b, gpath, ppath)
		b.Logf("wrote %s in %v", ppath, time.Since(t0).Round(time.Millisecond))
	}
	pool, err := prefab.OpenPool(ppath)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	sm, err := pool.StreamingModel()
	if err != nil {
		b.Fatal(err)
	}
	L := sm.Config.Layers
	var onC []int
	var cBytes int64
	for l := L / 2; l < L; l++ {
		onC = append(onC, l)
		cBytes += pool.Extent(l).Length
	}
	b.Logf("%s: layers %d..%d on tier C, %.2f GiB per pass", dev.Name(), L/2, L-1, gib(cBytes))
	sm = streamingModel(b, pool, onC)

	// Fidelity first: the tier-C model's logits against the resident one.
	{
		cpu, err := model.Open(gpath)
		if err != nil {
			b.Fatal(err)
		}
		res := loadGPU(b, cpu, Options{MaxSeqs: 1, MaxContext: 256})
		fs, err := stream.OpenFile(ppath, stream.FileOptions{})
		if err != nil {
			b.Fatal(err)
		}
		g := loadTierC(b, pool, fs, nil, onC, 2)
		worst, same, _ := lockstep(b, res, g, promptTokens(sm.Config.Vocab, 16, 3), 8)
		b.Logf("8b tier C vs resident: worst NMSE %.3g, %d of 9 passes bit-identical", worst, same)
		if worst != 0 {
			b.Errorf("8b tier-C logits differ from the resident model's: NMSE %.3g", worst)
		}
		for _, c := range []func() error{g.Close, res.Close, fs.Close, cpu.Close} {
			if err := c(); err != nil {
				b.Fatal(err)
			}
		}
	}

	type source struct {
		name  string
		steps int
		open  func() (tier.Source, error)
	}
	sources := []source{
		{"file", 6, func() (tier.Source, error) { return stream.OpenFile(ppath, stream.FileOptions{}) }},
		{"file-qd16", 6, func() (tier.Source, error) { return stream.OpenFile(ppath, stream.FileOptions{QueueDepth: 16}) }},
		{"mmap", 6, func() (tier.Source, error) { return stream.OpenMmap(ppath) }},
	}
	if dp := os.Getenv("STRATA_8B_DISK_POOL"); dp != "" {
		if _, err := os.Stat(dp); errors.Is(err, os.ErrNotExist) {
			t0 := time.Now()
			if err := copyFile(ppath, dp); err != nil {
				b.Fatal(err)
			}
			b.Logf("copied the pool to %s in %v", dp, time.Since(t0).Round(time.Millisecond))
		}
		sources = append(sources, source{"disk", 3, func() (tier.Source, error) { return stream.OpenFile(dp, stream.FileOptions{}) }})
	}
	ks := []int{2}
	if s := os.Getenv("STRATA_TIERC_K"); s != "" {
		ks = nil
		for _, f := range strings.Split(s, ",") {
			k, err := strconv.Atoi(f)
			if err != nil || k < 1 {
				b.Fatalf("STRATA_TIERC_K=%q", s)
			}
			ks = append(ks, k)
		}
	}
	ctx := context.Background()
	var peak float64
	for _, sc := range sources {
		src, err := sc.open()
		if err != nil {
			b.Fatal(err)
		}
		direct := "n/a"
		if fs, ok := src.(*stream.FileSource); ok {
			direct = strconv.FormatBool(fs.Direct())
		}
		alone := sourceAlone(b, src, pool, onC)
		b.Logf("%s (O_DIRECT %s): source alone %.2f GB/s → storage limit %.1f ms per pass", sc.name, direct, alone/1e9, float64(cBytes)/alone*1e3)
		kk := ks
		if sc.name == "disk" {
			kk = ks[:1] // seconds per pass: one depth is enough
		}
		for _, k := range kk {
			g := loadTierC(b, pool, src, nil, onC, k)
			if peak == 0 {
				peak = h2dPeak(b, g)
				b.Logf("pinned H2D peak %.1f GB/s → PCIe limit %.1f ms per pass", peak/1e9, float64(cBytes)/peak*1e3)
			}
			s, err := g.NewSequence(0)
			if err != nil {
				b.Fatal(err)
			}
			batch := []model.Step{{Seq: s, Tokens: promptTokens(sm.Config.Vocab, 4, 1)}}
			var el time.Duration
			var sum stream.Stats
			const warm = 2
			for i := 0; i < sc.steps+warm; i++ {
				t := time.Now()
				if err := g.Forward(ctx, batch); err != nil {
					b.Fatal(err)
				}
				if i >= warm {
					el += time.Since(t)
					_, last, _ := g.PipelineStats()
					sum.Add(last)
				}
				batch[0].Tokens = []int32{sample.Argmax(batch[0].Logits[0])}
			}
			per := el / time.Duration(sc.steps)
			limit := time.Duration(float64(cBytes) / alone * 1e9)
			ratio := per.Seconds() / limit.Seconds()
			b.Logf("%s k=%d: decode %.1f ms/token (%.2f tok/s); ÷ (tier-C bytes ÷ source alone) = %.3f", sc.name, k, ms(per), 1/per.Seconds(), ratio)
			b.Logf("%s k=%d: read %.2f GB/s busy %v stall %v (verify %v) | copy %.2f GB/s busy %v stall %v | compute busy %v stall %v | overlap %.2f, compute fed %.0f%% (per pass, %d passes)",
				sc.name, k, sum.Read.GBps, per1(sum.Read.Busy, sum.Passes), per1(sum.Read.Stall, sum.Passes), per1(sum.Verify, sum.Passes),
				sum.Copy.GBps, per1(sum.Copy.Busy, sum.Passes), per1(sum.Copy.Stall, sum.Passes),
				per1(sum.Compute.Busy, sum.Passes), per1(sum.Compute.Stall, sum.Passes), sum.Overlap, 100*sum.ComputeUtil, sum.Passes)
			b.ReportMetric(ratio, sc.name+"-k"+strconv.Itoa(k)+"-step/storage-limit")
			s.Close()
			if err := g.Close(); err != nil {
				b.Fatal(err)
			}
		}
		if err := src.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// per1 is d per pass.
func per1(d time.Duration, passes int64) time.Duration {
	if passes == 0 {
		return 0
	}
	return (d / time.Duration(passes)).Round(10 * time.Microsecond)
}

// sourceAlone reads the tier-C extents in order into one buffer, as
// stage 1 does without the pipeline around it, twice (the first warms a
// mapping or the page cache where there is one), and returns the bytes
// per second of the second round.
func sourceAlone(b *testing.B, src tier.Source, pool *prefab.Pool, layers []int) float64 {
	var maxLen, total int64
	for _, l := range layers {
		maxLen = max(maxLen, pool.Extent(l).Length)
		total += pool.Extent(l).Length
	}
	buf, err := src.Alloc(int(maxLen))
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	var el time.Duration
	for round := range 2 {
		t0 := time.Now()
		for _, l := range layers {
			e := pool.Extent(l)
			if err := src.ReadAt(context.Background(), buf.Bytes()[:e.Length], e.Offset); err != nil {
				b.Fatal(err)
			}
		}
		if round == 1 {
			el = time.Since(t0)
		}
	}
	return float64(total) / el.Seconds()
}

// copyFile copies src to dst (the disk copy of a pool) and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
