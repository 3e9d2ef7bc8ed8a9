package prefab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/internal/safefs"
)

// Prefab types accepted by Options.Type.
const (
	// TypeKeep copies every tensor's bytes unchanged.
	TypeKeep = "keep"
	// TypeQ8_0 stores matrices as Q8_0 (rows whose length is not a multiple
	// of 32 keep their type).
	TypeQ8_0 = "q8_0"
	// TypeQ4_K stores matrices as Q4_K (rows not a multiple of 256 fall
	// back to Q8_0, then to their own type).
	TypeQ4_K = "q4_k"
	// TypeINT8 stores matrices as strata's per-row INT8 (any row length).
	TypeINT8 = "int8"
)

// Types lists the values Options.Type accepts, for help text.
func Types() []string { return []string{TypeKeep, TypeQ8_0, TypeQ4_K, TypeINT8} }

// Options controls WritePool.
type Options struct {
	// Type is TypeKeep, TypeQ8_0, TypeQ4_K or TypeINT8 ("" means keep).
	// Norm vectors always stay F32; a matrix already in the target type is
	// copied, not requantized.
	Type string
	// Source is recorded in the manifest (e.g. the GGUF file's name).
	Source string
	// Progress, when set, is called with output bytes done and the pool's
	// total size as conversion proceeds (serialised, done never decreases;
	// the last call has done == total).
	Progress func(done, total int64)
	// Context, when set, cancels the write; the partial file is removed.
	Context context.Context
}

// matrixType returns the element type a matrix of rows of cols elements,
// now of type src, gets under prefab type typ.
func matrixType(typ string, src quant.Type, cols int) (quant.Type, error) {
	switch typ {
	case TypeKeep, "":
		return src, nil
	case TypeQ8_0:
		if cols%32 == 0 {
			return quant.Q8_0, nil
		}
		return src, nil
	case TypeQ4_K:
		if cols%quant.QK_K == 0 {
			return quant.Q4_K, nil
		}
		if cols%32 == 0 {
			return quant.Q8_0, nil
		}
		return src, nil
	case TypeINT8:
		return quant.INT8Row, nil
	}
	return 0, fmt.Errorf("unknown prefab type %q (want one of %v)", typ, Types())
}

// plannedTensor is one tensor to write: where it comes from and where it goes.
type plannedTensor struct {
	src model.Tensor // source tensor (bytes are a view of the GGUF mapping)
	typ quant.Type   // output type
	off int64        // offset in the extent
	sz  int64        // output bytes
}

// plannedExtent is one extent to write.
type plannedExtent struct {
	desc    *extentDesc
	tensors []plannedTensor
}

// WritePool writes the GGUF model src as a prefab pool at path: the
// globals extent, then one extent per layer with its tensors in kernel
// order, each converted to opts.Type. It writes a new temporary file beside
// path (safefs.CreateTemp: never a planted symlink's target) and renames it
// over path only when everything (including fsync) succeeded, so an
// interrupted prefab never leaves a half-written pool under the real name.
// Conversion of each tensor is spread over GOMAXPROCS goroutines and
// overlaps with writing the previous extent; memory use is about two of the
// largest extents.
func WritePool(src *gguf.Mapped, path string, opts Options) error {
	if src == nil || src.File == nil {
		return errors.New("prefab: nil source")
	}
	mod, err := model.LoadGGUF(src)
	if err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	vocab, err := tokenizer.VocabFromGGUF(src.File)
	if err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	return WriteModelPool(mod, vocab, path, opts)
}

// WriteModelPool is WritePool for a model already in memory (its weights'
// bytes are read, never modified) and its tokenizer vocabulary: tests and
// converters from other formats use it.
func WriteModelPool(mod *model.Model, vocab *tokenizer.Vocab, path string, opts Options) (err error) {
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if _, err := matrixType(opts.Type, quant.F32, quant.QK_K); err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	if opts.Type == "" {
		opts.Type = TypeKeep
	}
	if mod == nil || vocab == nil {
		return errors.New("prefab: nil model or vocabulary")
	}
	if len(vocab.Tokens) != mod.Config.Vocab {
		return fmt.Errorf("prefab: tokenizer has %d tokens but the model's vocabulary is %d", len(vocab.Tokens), mod.Config.Vocab)
	}
	man, exts, err := planPool(mod, vocab, opts)
	if err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	manBytes, err := placeExtents(man, exts)
	if err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	last := exts[len(exts)-1].desc
	total := last.Offset + last.Length

	f, err := safefs.CreateTemp(path, 0o644)
	if err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Truncate(total); err != nil {
		return fmt.Errorf("prefab: sizing %s: %w", tmp, err)
	}

	prog := newProgress(opts.Progress, total)
	if err := writeExtents(ctx, f, exts, prog); err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	// Now the checksums are known: the manifest keeps its length because
	// they are fixed-width hex.
	manBytes2, err := json.Marshal(man)
	if err != nil {
		return fmt.Errorf("prefab: manifest: %w", err)
	}
	if len(manBytes2) != len(manBytes) {
		return fmt.Errorf("prefab: internal error: manifest changed size from %d to %d bytes", len(manBytes), len(manBytes2))
	}
	hdr := append(encodeHeader(manBytes2), manBytes2...)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return fmt.Errorf("prefab: writing manifest: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("prefab: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("prefab: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("prefab: %w", err)
	}
	prog.add(total - prog.done.Load())
	return nil
}

// planPool decides every tensor's output type and offset inside its extent
// and builds the manifest (checksums zero, extent offsets unset).
func planPool(mod *model.Model, vocab *tokenizer.Vocab, opts Options) (*manifest, []plannedExtent, error) {
	cfg := mod.Config
	w := mod.Weights
	man := &manifest{
		Format: formatName, Arch: cfg.Arch, Type: opts.Type, Source: opts.Source,
		Config: configToManifest(cfg), Vocab: vocabToManifest(vocab),
		Layers: make([]extentDesc, cfg.Layers),
	}
	build := func(d *extentDesc, ts []model.Tensor, norms []bool) (plannedExtent, error) {
		pe := plannedExtent{desc: d}
		var pos int64
		for i, t := range ts {
			typ := quant.F32
			if !norms[i] {
				var err error
				if typ, err = matrixType(opts.Type, t.Type, t.Cols); err != nil {
					return pe, err
				}
			}
			dims := []uint64{uint64(t.Cols), uint64(t.Rows)}
			if norms[i] {
				dims = dims[:1]
			}
			sz, err := typ.TensorBytes(dims)
			if err != nil {
				return pe, fmt.Errorf("tensor %s as %v: %w", t.Name, typ, err)
			}
			pos = hostmem.AlignUp(pos, TensorAlign)
			pe.tensors = append(pe.tensors, plannedTensor{src: t, typ: typ, off: pos, sz: sz})
			d.Tensors = append(d.Tensors, tensorDesc{Name: t.Name, Type: typ.String(), Dims: dims, Offset: pos, Bytes: sz})
			pos += sz
		}
		d.Length = hostmem.AlignUp(max(pos, 1), ExtentAlign)
		d.XXH3 = hexSum(0)
		return pe, nil
	}
	gts := []model.Tensor{w.Embed, w.OutputNorm}
	gnorm := []bool{false, true}
	if !cfg.TiedOutput {
		gts = append(gts, w.Output)
		gnorm = append(gnorm, false)
	}
	for i, n := range globalNames(cfg.TiedOutput) {
		gts[i].Name = n
	}
	var exts []plannedExtent
	pe, err := build(&man.Globals, gts, gnorm)
	if err != nil {
		return nil, nil, err
	}
	exts = append(exts, pe)
	extent := func(d *extentDesc, i int, order []role) error {
		ts := make([]model.Tensor, len(order))
		norms := make([]bool, len(order))
		for j, r := range order {
			ts[j] = *r.field(&w.Layers[i])
			ts[j].Name = "blk." + strconv.Itoa(i) + "." + r.suffix
			norms[j] = r.norm
		}
		pe, err := build(d, ts, norms)
		if err != nil {
			return err
		}
		exts = append(exts, pe)
		return nil
	}
	order := layerOrder(&cfg)
	for i := range w.Layers {
		if err := extent(&man.Layers[i], i, order); err != nil {
			return nil, nil, err
		}
		if cfg.MoE() {
			man.Layers[i].Experts = make([]extentDesc, cfg.Experts)
		}
		for e := range man.Layers[i].Experts {
			if err := extent(&man.Layers[i].Experts[e], i, expertOrder(&cfg, e)); err != nil {
				return nil, nil, err
			}
		}
	}
	return man, exts, nil
}

// placeExtents assigns extent offsets after the header and manifest. The
// manifest's size depends on the offsets' decimal digits, so it iterates
// until the first extent's aligned start no longer moves (two or three
// rounds). It returns the encoded manifest.
func placeExtents(man *manifest, exts []plannedExtent) ([]byte, error) {
	base := int64(ExtentAlign)
	for range 16 {
		off := base
		for _, e := range exts {
			e.desc.Offset = off
			off += e.desc.Length
		}
		b, err := json.Marshal(man)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if int64(len(b)) > maxManifest {
			return nil, fmt.Errorf("manifest of %d bytes exceeds the %d-byte limit", len(b), maxManifest)
		}
		need := hostmem.AlignUp(HeaderSize+int64(len(b)), ExtentAlign)
		if need == base {
			return b, nil
		}
		base = need
	}
	return nil, errors.New("manifest layout did not converge")
}

// progress serialises calls to the user's callback.
type progress struct {
	fn    func(done, total int64)
	total int64
	mu    sync.Mutex
	done  atomic.Int64
}

func newProgress(fn func(done, total int64), total int64) *progress {
	return &progress{fn: fn, total: total}
}

func (p *progress) add(n int64) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	d := p.done.Add(n)
	p.fn(d, p.total)
	p.mu.Unlock()
}

// filled is an extent buffer ready to write.
type filled struct {
	e   *extentDesc
	buf []byte
}

// writeExtents converts extents into buffers on the calling goroutine
// (each tensor in parallel) while a second goroutine hashes and writes the
// previous one.
func writeExtents(ctx context.Context, f *os.File, exts []plannedExtent, prog *progress) error {
	var maxLen int64
	for _, e := range exts {
		maxLen = max(maxLen, e.desc.Length)
	}
	free := make(chan []byte, 2)
	free <- make([]byte, maxLen)
	free <- make([]byte, maxLen)
	full := make(chan filled, 1)
	werr := make(chan error, 1)
	var wfailed atomic.Bool
	go func() {
		var err error
		for x := range full {
			if err == nil {
				x.e.XXH3 = hexSum(xxh3.Hash(x.buf))
				if _, werr := f.WriteAt(x.buf, x.e.Offset); werr != nil {
					err = fmt.Errorf("writing extent at %d: %w", x.e.Offset, werr)
					wfailed.Store(true)
				}
				prog.add(x.e.Length - usedBytes(x.e)) // padding
			}
			free <- x.buf[:cap(x.buf)]
		}
		werr <- err
	}()
	var err error
	for i := range exts {
		if err = ctx.Err(); err != nil || wfailed.Load() {
			break
		}
		buf := <-free
		buf = buf[:exts[i].desc.Length]
		clear(buf)
		if err = convertExtent(ctx, &exts[i], buf, prog); err != nil {
			break
		}
		full <- filled{exts[i].desc, buf}
	}
	close(full)
	if e := <-werr; err == nil {
		err = e
	}
	return err
}

func usedBytes(d *extentDesc) int64 {
	var n int64
	for _, t := range d.Tensors {
		n += t.Bytes
	}
	return n
}

// chunkElems is the number of elements one conversion work item covers:
// large enough to amortise scheduling, small enough to balance the cores
// and keep progress smooth (~25 ms of Q4_K quantization).
const chunkElems = 1 << 18

// convertExtent writes every tensor of pe into buf at its offset.
func convertExtent(ctx context.Context, pe *plannedExtent, buf []byte, prog *progress) error {
	for _, t := range pe.tensors {
		dst := buf[t.off : t.off+t.sz]
		if t.typ == t.src.Type {
			copy(dst, t.src.Data)
			prog.add(t.sz)
			continue
		}
		if err := convertTensor(ctx, t.src, t.typ, dst, prog); err != nil {
			return fmt.Errorf("converting %s from %v to %v: %w", t.src.Name, t.src.Type, t.typ, err)
		}
	}
	return nil
}

// convertTensor dequantizes src and quantizes it as typ into dst, in chunks
// of rows spread over GOMAXPROCS goroutines.
func convertTensor(ctx context.Context, src model.Tensor, typ quant.Type, dst []byte, prog *progress) error {
	srb, err := src.Type.RowBytes(int64(src.Cols))
	if err != nil {
		return err
	}
	drb, err := typ.RowBytes(int64(src.Cols))
	if err != nil {
		return err
	}
	rowsPer := max(1, chunkElems/src.Cols)
	chunks := (src.Rows + rowsPer - 1) / rowsPer
	workers := min(runtime.GOMAXPROCS(0), chunks)
	var next atomic.Int64
	var failed atomic.Bool
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scratch := make([]float32, rowsPer*src.Cols)
			for !failed.Load() {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[w] = err
					failed.Store(true)
					return
				}
				r0 := c * rowsPer
				n := min(rowsPer, src.Rows-r0)
				f := scratch[:n*src.Cols]
				sb := src.Data[int64(r0)*srb : int64(r0+n)*srb]
				db := dst[int64(r0)*drb : int64(r0+n)*drb]
				if err := quant.DequantizeRows(src.Type, sb, src.Cols, f); err != nil {
					errs[w] = fmt.Errorf("rows %d..%d: %w", r0, r0+n, err)
					failed.Store(true)
					return
				}
				if err := quant.QuantizeRows(typ, f, src.Cols, db); err != nil {
					errs[w] = fmt.Errorf("rows %d..%d: %w", r0, r0+n, err)
					failed.Store(true)
					return
				}
				prog.add(int64(len(db)))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
