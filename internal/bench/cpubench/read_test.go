package cpubench

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strata-llm/strata/internal/hostcpu"
	"github.com/strata-llm/strata/internal/hostmem"
)

// xorRef is what every read loop returns: the XOR of b's 64-bit words
// and of its last len(b)%8 bytes.
func xorRef(b []byte) uint64 {
	var s uint64
	for i := 0; i+8 <= len(b); i += 8 {
		s ^= binary.LittleEndian.Uint64(b[i:])
	}
	for _, c := range b[len(b)/8*8:] {
		s ^= uint64(c)
	}
	return s
}

// TestReadLoops: every loop sees every byte, at every length and
// alignment.
func TestReadLoops(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<16+64)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	loops := map[string]func([]byte) uint64{"read": read, "readGo": readGo}
	for name, l := range asmLoops() {
		loops[name] = l
	}
	for _, n := range []int{0, 1, 7, 8, 63, 256, 511, 512, 513, 1024, 4096 + 17, 1 << 16} {
		for _, off := range []int{0, 1, 8, 32} {
			b := buf[off : off+n]
			want := xorRef(b)
			for name, l := range loops {
				if got := l(b); got != want {
					t.Errorf("%s(%d bytes at +%d) = %#x, want %#x", name, n, off, got, want)
				}
			}
		}
	}
	// A single flipped bit anywhere changes the result.
	b := buf[:4096]
	want := read(b)
	for _, i := range []int{0, 31, 32, 511, 512, 4095} {
		b[i] ^= 4
		if read(b) == want {
			t.Errorf("flipping a bit of byte %d leaves the result", i)
		}
		b[i] ^= 4
	}
}

// BenchmarkRead: one pinned thread reading a buffer in L2 and one far
// larger than any cache, with each loop: the probe's assembly loops, its
// portable Go loop and the plain Go loop it must beat.
func BenchmarkRead(b *testing.B) {
	loops := map[string]func([]byte) uint64{"go": readGo, "naive": naiveRead}
	for name, l := range asmLoops() {
		loops[name] = l
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"L2", cacheBufBytes}, {"DRAM", 1 << 30}} {
		r, err := hostmem.Alloc(size.n, hostmem.AllocOptions{HugePages: true}) // as the probe's buffer
		if err != nil {
			b.Fatal(err)
		}
		defer r.Free()
		buf := r.Bytes()
		fill(buf)
		for _, name := range []string{"readAVX512", "readAVX2", "go", "naive"} {
			l, ok := loops[name]
			if !ok {
				continue
			}
			b.Run(size.name+"/"+name, func(b *testing.B) {
				restore, err := hostcpu.Pin(firstCPU(b))
				if err != nil {
					b.Fatal(err)
				}
				defer restore()
				b.SetBytes(int64(len(buf)))
				for b.Loop() {
					sink.Add(l(buf))
				}
			})
		}
	}
}

// TestReadBandwidth: the hybrid bench's memory ceiling reads a buffer
// with every usable CPU and reports a positive rate; a cancelled context
// stops it with an error.
func TestReadBandwidth(t *testing.T) {
	t.Parallel()
	r, err := ReadBandwidth(context.Background(), 64<<20, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !(r > 1e8) {
		t.Fatalf("read rate %g B/s", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadBandwidth(ctx, 64<<20, 50*time.Millisecond); err == nil {
		t.Error("cancelled: no error")
	}
}

// TestReadWindow: the at-once probe's CPU half reads for at least its
// span, reports a window of that length that the rate is taken over, and
// stops with an error when its context is cancelled.
func TestReadWindow(t *testing.T) {
	t.Parallel()
	const d = 50 * time.Millisecond
	before := time.Now()
	r, from, to, err := ReadWindow(context.Background(), 64<<20, d)
	if err != nil {
		t.Fatal(err)
	}
	if !(r > 1e8) {
		t.Fatalf("read rate %g B/s", r)
	}
	if from.Before(before) || to.Sub(from) < d || time.Since(to) < 0 {
		t.Fatalf("window %v..%v (since start %v..%v), want at least %v", from, to, from.Sub(before), to.Sub(before), d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := ReadWindow(ctx, 64<<20, d); err == nil {
		t.Error("cancelled: no error")
	}
}
