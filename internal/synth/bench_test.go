package synth

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/quant"
)

var (
	benchDir   = flag.String("synth.benchdir", "", "if set, TestWriteThroughput writes a GGUF (default llama 8b q4_k_m, ~4.9 GB) and a raw file of the same size there and reports MB/s")
	benchModel = flag.String("synth.benchmodel", "llama/8b/q4_k_m", "arch/shape/type that TestWriteThroughput writes")
)

// rawWrite writes total bytes from a fixed buffer to f in 4 MiB writes: the
// speed ceiling of the destination for synth's write pattern.
func rawWrite(f *os.File, total int64) error {
	buf := make([]byte, 4<<20)
	if err := quant.FillRandom(quant.Q4_K, buf[:len(buf)/144*144], 1, 1); err != nil {
		return err
	}
	for total > 0 {
		n := min(total, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
		total -= n
	}
	return nil
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

// BenchmarkWriteGGUF measures whole-model generation + writing to
// /dev/null (b.SetBytes reports MB/s of tensor data), and the raw speed of
// writing the same bytes there.
func BenchmarkWriteGGUF(b *testing.B) {
	for _, c := range []Options{
		{Arch: "llama", Shape: "8b", Type: "q4_k_m"},
		{Arch: "gemma2", Shape: "8b", Type: "q8_0"},
		{Arch: "llama", Shape: "tiny", Type: "f32"},
	} {
		p, err := newPlan(c)
		if err != nil {
			b.Fatal(err)
		}
		total, _ := dataBytes(p.specs)
		b.Run(fmt.Sprintf("%s-%s-%s", c.Arch, c.Shape, c.Type), func(b *testing.B) {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			b.SetBytes(total)
			for b.Loop() {
				if _, err := p.writeGGUF(devnull); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%s-%s-%s-raw", c.Arch, c.Shape, c.Type), func(b *testing.B) {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			b.SetBytes(total)
			for b.Loop() {
				if err := rawWrite(devnull, total); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWriteThroughput compares Write of a model (llama 8b q4_k_m unless
// -synth.benchmodel says otherwise; including fsync)
// with a raw sequential write of the same size to the same directory, and
// generation to /dev/null. It runs only with -synth.benchdir.
func TestWriteThroughput(t *testing.T) {
	if *benchDir == "" {
		t.Skip("set -synth.benchdir=DIR to measure write throughput")
	}
	parts := strings.Split(*benchModel, "/")
	if len(parts) != 3 {
		t.Fatalf("-synth.benchmodel %q: want arch/shape/type", *benchModel)
	}
	opts := Options{Arch: parts[0], Shape: parts[1], Type: parts[2], Seed: 1}
	total, err := Size(opts)
	if err != nil {
		t.Fatal(err)
	}

	rawPath := filepath.Join(*benchDir, "synth-raw.bin")
	defer os.Remove(rawPath)
	raw := func() time.Duration {
		f, err := os.Create(rawPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		start := time.Now()
		if err := rawWrite(f, total); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		os.Remove(rawPath)
		return d
	}
	rawBefore := raw()

	p, err := newPlan(opts)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := p.writeGGUF(io.Discard); err != nil {
		t.Fatal(err)
	}
	nullDur := time.Since(start)

	path := filepath.Join(*benchDir, "synth-bench.gguf")
	defer os.Remove(path)
	start = time.Now()
	if err := Write(path, opts); err != nil {
		t.Fatal(err)
	}
	synthDur := time.Since(start)
	os.Remove(path)
	rawAfter := raw()
	rawDur := (rawBefore + rawAfter) / 2

	t.Logf("%s, %d MB of tensor data, GOMAXPROCS %d", *benchModel, total/1e6, runtime.GOMAXPROCS(0))
	t.Logf("raw write + fsync:       %6.0f MB/s before, %6.0f MB/s after", mbps(total, rawBefore), mbps(total, rawAfter))
	t.Logf("synth to io.Discard:     %6.0f MB/s (%v)", mbps(total, nullDur), nullDur.Round(time.Millisecond))
	t.Logf("synth.Write + fsync:     %6.0f MB/s (%v), %.0f%% of raw", mbps(total, synthDur), synthDur.Round(time.Millisecond), 100*rawDur.Seconds()/synthDur.Seconds())
}
