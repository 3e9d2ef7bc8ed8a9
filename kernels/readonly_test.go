package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// TestReadXORArgs: bad spans and sinks are errors before anything
// launches (host-only).
func TestReadXORArgs(t *testing.T) {
	t.Parallel()
	k := testKernels(1)
	ok := Span{Ptr: 4096, Bytes: 64}
	for _, c := range []struct {
		name  string
		sink  cudadrv.DevPtr
		spans []Span
		want  string
	}{
		{"no spans", 256, nil, "0 spans"},
		{"four spans", 256, []Span{ok, ok, ok, ok}, "4 spans"},
		{"no sink", 0, []Span{ok}, "sink"},
		{"odd sink", 258, []Span{ok}, "sink"},
		{"negative span", 256, []Span{{Ptr: 4096, Bytes: -16}}, "span 0"},
		{"null span", 256, []Span{ok, {Ptr: 0, Bytes: 16}}, "span 1"},
	} {
		err := k.ReadXOR(nil, 0, c.sink, c.spans...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// xorWords is the XOR of the little-endian uint32 words of the 16-byte
// words that cover b[off:off+n] (ReadXOR's widening), b's start being
// 16-byte aligned.
func xorWords(b []byte, off, n int) uint32 {
	lo, hi := off&^15, (off+n+15)&^15
	var x uint32
	for i := lo; i < hi; i += 4 {
		x ^= binary.LittleEndian.Uint32(b[i:])
	}
	return x
}

func xorAll(v []uint32) uint32 {
	var x uint32
	for _, w := range v {
		x ^= w
	}
	return x
}

// TestReadXOR: read_xor reads every word of its spans, misaligned ones
// widened to whole 16-byte words: its XOR is the host's.
func TestReadXOR(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	spans := [][2]int{{6, 1001}, {4096, 65536}, {100002, 2000002}}
	run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
		base := put(a, buf)
		sink := put(a, make([]uint32, k.ReadXORBlocks()))
		var want uint32
		var sp []Span
		for _, s := range spans {
			want ^= xorWords(buf, s[0], s[1])
			sp = append(sp, Span{Ptr: base + cudadrv.DevPtr(s[0]), Bytes: int64(s[1])})
		}
		must(k.ReadXOR(c, 0, sink, sp...))
		must(c.StreamSync(0))
		if got := xorAll(get[uint32](a, sink, k.ReadXORBlocks())); got != want {
			failOnDevice("read_xor over %v: %#x, want %#x", spans, got, want)
		}
	})
}

// TestGEMVReadOnly: with SetGEMVReadOnly's sink set, the integer GEMVs
// launch read_xor as often as they launch products (the same graph nodes,
// x quantization included: q/k/v with a Q6KA v in one mixed launch,
// gate/up, a tall Q6KA matrix), read every byte of their matrices (the
// sink holds their XOR) and leave their outputs alone.
func TestGEMVReadOnly(t *testing.T) {
	t.Parallel()
	_, _ = gpu(t)
	const cols = 4096
	type mat = gemvqMat
	for ci, tc := range []struct {
		name string
		ms   []mat
		glu  GLU
	}{
		{"qkv-mixed", []mat{{quant.Q4_K, 64}, {quant.Q4_K, 16}, {quant.Q6_K, 16}}, 0},
		{"qkv-q4k", []mat{{quant.Q4_K, 64}, {quant.Q4_K, 16}, {quant.Q4_K, 16}}, 0},
		{"glu", []mat{{quant.Q4_K, 96}, {quant.Q4_K, 96}}, SwiGLU},
		{"q6ka-tall", []mat{{quant.Q6_K, 1153}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 5))
			xs := normLike(r, 1, cols)
			datas := make([][]byte, len(tc.ms))
			for i, m := range tc.ms {
				datas[i], _ = randMatrix(m.typ, m.rows, cols, uint64(300+10*ci+i))
			}
			run(t, func(c *cudadrv.Ctx, k *Kernels, a *arena) {
				// A view of its own: SetGEMVReadOnly changes only it.
				k = k.WithTuning(k.Tuning())
				s, done := gemvqStream(c, k, cols)
				defer done()
				x := put(a, xs)
				outs := make([]GEMVOut, len(tc.ms))
				var want uint32
				for i, m := range tc.ms {
					outs[i] = GEMVOut{W: Matrix{Type: m.typ, Rows: m.rows, Cols: cols, Ptr: put(a, datas[i])}, Y: a.alloc(int64(4 * m.rows))}
					if m.typ == quant.Q6_K {
						w, err := k.RelayQ6K(c, s, outs[i].W)
						must(err)
						outs[i].W = w
						must(c.StreamSync(s)) // the download below is on another stream
					}
					// The matrix as it now lies on the device (re-laid or
					// not), padded to its allocation's 16-byte words.
					n := int(outs[i].W.Bytes())
					dev := get[byte](a, outs[i].W.Ptr, (n+15)&^15)
					want ^= xorWords(dev, 0, n)
				}
				launch := func() {
					switch {
					case tc.glu != 0:
						must(k.GEMVGLU(c, s, outs[0].W, outs[1].W, x, outs[0].Y, 1, tc.glu))
					case len(outs) == 1:
						must(k.GEMV(c, s, outs[0].W, x, outs[0].Y, 1))
					default:
						must(k.GEMVFused(c, s, x, 1, outs...))
					}
				}
				nodes := func() int {
					must(c.BeginCapture(s, cudadrv.CaptureThreadLocal))
					launch()
					g, err := c.EndCapture(s)
					must(err)
					defer c.DestroyGraph(g)
					n, err := c.GraphNodes(g)
					must(err)
					return n
				}
				plain := nodes()
				sink := put(a, make([]uint32, k.ReadXORBlocks()))
				k.SetGEMVReadOnly(sink)
				defer k.SetGEMVReadOnly(0)
				ro := nodes()
				if ro != plain {
					failOnDevice("read-only launches: %d graph nodes, the products %d", ro, plain)
				}
				for i, m := range tc.ms {
					poison(a, outs[i].Y, m.rows)
				}
				launch()
				must(c.StreamSync(s))
				if got := xorAll(get[uint32](a, sink, k.ReadXORBlocks())); got != want {
					failOnDevice("sink %#x, want the matrices' XOR %#x", got, want)
				}
				for i, m := range tc.ms {
					for j, v := range get[float32](a, outs[i].Y, m.rows) {
						if v == v {
							failOnDevice("output %d row %d written (%v) in read-only mode", i, j, v)
						}
					}
				}
			})
		})
	}
}
