package synth

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"

	"github.com/strata-llm/strata/engine/quant"
)

// chunkElems is the number of elements generated as one unit of work. It is
// a constant (not derived from the core count) because chunk c of tensor i
// is seeded from (seed, i, c): the bytes must not depend on the machine.
// 1M elements is 4 MiB of F32 or 576 KiB of Q4_K: large enough to amortize
// scheduling, small enough that the pipeline's buffers stay modest.
const chunkElems = 1 << 20

// mix64 is the splitmix64 finaliser, a bijective 64-bit hash.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// tensorSeed derives tensor i's seed from the model seed alone, so a
// tensor's bytes do not depend on which other tensors exist or in which
// order they are generated.
func tensorSeed(seed uint64, i int) uint64 {
	return mix64(mix64(seed+0x9e3779b97f4a7c15) ^ (uint64(i)+1)*0xd1b54a32d192ed03)
}

// chunkSeed derives the seed of chunk c of a tensor.
func chunkSeed(ts uint64, c int) uint64 {
	return mix64(ts ^ (uint64(c)+1)*0x8cb92ba72f3d8dd7)
}

// numChunks returns how many work chunks tensor spec is cut into.
func numChunks(spec *TensorSpec) int {
	if spec.kind != kindMatrix {
		return 1
	}
	n := spec.Elems()
	return int((n + chunkElems - 1) / chunkElems)
}

// chunkRange returns the element count and byte size of chunk c.
func chunkRange(spec *TensorSpec, c int) (elems, bytes int64, err error) {
	n := spec.Elems()
	if spec.kind == kindMatrix {
		start := int64(c) * chunkElems
		elems = min(chunkElems, n-start)
	} else {
		elems = n
	}
	t := spec.Type
	bytes = elems / int64(t.BlockElems()) * int64(t.BlockBytes())
	if elems%int64(t.BlockElems()) != 0 {
		return 0, 0, fmt.Errorf("synth: tensor %s chunk %d: %d elements is not a whole number of %v blocks", spec.Name, c, elems, t)
	}
	return elems, bytes, nil
}

// normValues returns w for norm tensor i (n values, w = offset + noise,
// noise ~ N(0, normNoiseStd), in float32); the GGUF stores float32(1 + w).
// Generating w first means a gemma2 HF checkpoint can store w itself, and
// transformers' float32 1 + w reproduces the GGUF value bit for bit.
func normValues(seed uint64, i, n int, offset float32) ([]float32, error) {
	buf := make([]byte, 4*n)
	if err := quant.FillRandom(quant.F32, buf, tensorSeed(seed, i), normNoiseStd); err != nil {
		return nil, fmt.Errorf("synth: norm noise: %w", err)
	}
	w := make([]float32, n)
	for j := range w {
		w[j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:])) + offset
	}
	return w, nil
}

func putF32s(dst []byte, v []float32) {
	for j, x := range v {
		binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(x))
	}
}

// genChunk writes chunk c of tensor i (spec) into dst, which must have the
// chunk's byte size.
func genChunk(s *Shape, spec *TensorSpec, seed uint64, i, c int, dst []byte) error {
	switch spec.kind {
	case kindMatrix:
		if err := quant.FillRandom(spec.Type, dst, chunkSeed(tensorSeed(seed, i), c), spec.std); err != nil {
			return fmt.Errorf("synth: tensor %s: %w", spec.Name, err)
		}
	case kindNorm:
		w, err := normValues(seed, i, len(dst)/4, spec.normOffset)
		if err != nil {
			return err
		}
		for j := range w {
			w[j] = 1 + w[j]
		}
		putF32s(dst, w)
	case kindRopeLong, kindRopeShort:
		long, short := PhiRopeFactors(*s)
		f := long
		if spec.kind == kindRopeShort {
			f = short
		}
		if len(dst) != 4*len(f) {
			return fmt.Errorf("synth: %s: %d bytes for %d values", spec.Name, len(dst), len(f))
		}
		putF32s(dst, f)
	case kindRopeFreqs:
		f := RopeFreqs(*s)
		if len(dst) != 4*len(f) {
			return fmt.Errorf("synth: rope_freqs: %d bytes for %d values", len(dst), len(f))
		}
		putF32s(dst, f)
	}
	return nil
}

// tensorBytes generates tensor i completely (for the HF export and tests).
func tensorBytes(s *Shape, specs []TensorSpec, seed uint64, i int) ([]byte, error) {
	spec := &specs[i]
	size, err := spec.Type.TensorBytes(spec.Dims)
	if err != nil {
		return nil, fmt.Errorf("synth: tensor %s: %w", spec.Name, err)
	}
	out := make([]byte, size)
	var off int64
	for c := 0; c < numChunks(spec); c++ {
		_, n, err := chunkRange(spec, c)
		if err != nil {
			return nil, err
		}
		if err := genChunk(s, spec, seed, i, c, out[off:off+n]); err != nil {
			return nil, err
		}
		off += n
	}
	return out, nil
}

// job is one chunk of work and the channel its result goes to.
type job struct {
	tensor, chunk int
	last          bool // the tensor's final chunk
	size          int64
	res           chan result
}

type result struct {
	buf []byte
	err error
}

// pipeline generates every chunk of every tensor, in file order, on
// GOMAXPROCS workers, while the consumer (gguf.Writer's data callback)
// writes them sequentially. At most `ahead` chunks are in flight beyond the
// one being written, which bounds memory to a few dozen chunk buffers.
type pipeline struct {
	order chan *job
	done  chan struct{}
	wg    sync.WaitGroup
	pool  sync.Pool
}

func startPipeline(s *Shape, specs []TensorSpec, seed uint64) *pipeline {
	workers := runtime.GOMAXPROCS(0)
	ahead := 2 * workers
	p := &pipeline{order: make(chan *job, ahead), done: make(chan struct{})}
	work := make(chan *job)
	for w := 0; w < workers; w++ {
		p.wg.Go(func() {
			for j := range work {
				buf := p.getBuf(j.size)
				err := genChunk(s, &specs[j.tensor], seed, j.tensor, j.chunk, buf)
				j.res <- result{buf: buf, err: err} // buffered: never blocks
			}
		})
	}
	p.wg.Go(func() {
		defer close(work)
		for i := range specs {
			nc := numChunks(&specs[i])
			for c := 0; c < nc; c++ {
				_, size, err := chunkRange(&specs[i], c)
				j := &job{tensor: i, chunk: c, last: c == nc-1, size: size, res: make(chan result, 1)}
				if err != nil {
					j.res <- result{err: err}
				}
				select {
				case p.order <- j:
				case <-p.done:
					return
				}
				if err != nil {
					return
				}
				select {
				case work <- j:
				case <-p.done:
					return
				}
			}
		}
	})
	return p
}

func (p *pipeline) getBuf(n int64) []byte {
	if b, ok := p.pool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func (p *pipeline) putBuf(b []byte) { p.pool.Put(&b) }

// writeTensor copies tensor i's chunks, in order, to dst, calling progress
// after each chunk.
func (p *pipeline) writeTensor(i int, dst io.Writer, progress func(int64)) error {
	for {
		j := <-p.order
		if j.tensor != i {
			return fmt.Errorf("synth: internal error: chunk of tensor %d while writing tensor %d", j.tensor, i)
		}
		r := <-j.res
		if r.err != nil {
			return r.err
		}
		if _, err := dst.Write(r.buf); err != nil {
			return err
		}
		p.putBuf(r.buf)
		progress(int64(len(r.buf)))
		if j.last {
			return nil
		}
	}
}

// stop ends the pipeline and waits for its goroutines.
func (p *pipeline) stop() {
	close(p.done)
	p.wg.Wait()
}
