package synth

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/internal/safefs"
)

// Options selects the model Write produces.
type Options struct {
	// Arch is a catalogue architecture (a key of Shapes).
	Arch string
	// Shape is "tiny", "8b" or "70b" (see Shapes).
	Shape string
	// Type is "f32", "f16", "bf16", "q8_0" or "q4_k_m".
	Type string
	// Seed determines every weight: tensor i's bytes depend only on (Seed,
	// i). The tokenizer is the same for every seed.
	Seed uint64
	// HFDir, when set, also receives the same weights as a Hugging Face
	// directory (config.json, F32 safetensors, tokenizer.json and its
	// config, generation_config.json). The tensors hold exactly
	// the values the GGUF encodes (dequantized, llama q/k rows un-permuted,
	// gemma2 norms minus one). The whole model is built in memory, so this
	// is refused for models over 64 MiB in F32 (the tiny shapes' are
	// smaller) and for quantized types unless HFForce is set.
	HFDir string
	// HFForce allows HFDir for any shape and type.
	HFForce bool
	// HFMaxShardBytes is the safetensors shard size; 0 means 5 GB, as
	// transformers' default.
	HFMaxShardBytes int64
	// Progress, when not nil, is called from Write's goroutine after each
	// chunk of GGUF tensor data is written, with bytes done and total.
	Progress func(done, total int64)
}

// DefaultHFShardBytes is the shard size used when HFMaxShardBytes is 0.
const DefaultHFShardBytes = 5_000_000_000

// plan is a resolved Options.
type plan struct {
	shape Shape
	specs []TensorSpec
	vocab *Vocab
	opts  Options
}

func newPlan(opts Options) (*plan, error) {
	s, err := LookupShape(opts.Arch, opts.Shape)
	if err != nil {
		return nil, err
	}
	specs, err := Layout(s, opts.Type)
	if err != nil {
		return nil, err
	}
	if f32 := 4 * paramCount(specs); opts.HFDir != "" && !opts.HFForce && (f32 > hfSmall || (opts.Type != "f32" && opts.Type != "f16")) {
		return nil, fmt.Errorf("synth: refusing to write a Hugging Face copy of %s %s %s: it is built in memory as F32 (%s); only f32/f16 models of at most %s (the tiny shapes) are allowed without HFForce",
			s.Arch, s.Name, opts.Type, humanBytes(f32), humanBytes(hfSmall))
	}
	v, err := VocabFor(s)
	if err != nil {
		return nil, err
	}
	return &plan{shape: s, specs: specs, vocab: v, opts: opts}, nil
}

// paramCount returns the number of stored weights (tied output counted once).
func paramCount(specs []TensorSpec) int64 {
	var n int64
	for i := range specs {
		n += specs[i].Elems()
	}
	return n
}

func humanBytes(n int64) string {
	const unit = 1 << 30
	if n >= unit {
		return fmt.Sprintf("%.1f GiB", float64(n)/unit)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Size returns the GGUF data size in bytes (excluding the header) of the
// model opts describes, for progress displays and disk-space checks.
func Size(opts Options) (int64, error) {
	s, err := LookupShape(opts.Arch, opts.Shape)
	if err != nil {
		return 0, err
	}
	specs, err := Layout(s, opts.Type)
	if err != nil {
		return 0, err
	}
	return dataBytes(specs)
}

// hfSmall is the largest F32 copy Write builds for an HFDir without
// HFForce: the tiny shapes' (tiny-128, the widest, is 25 MiB).
const hfSmall = 64 << 20

// HFBytes returns the size of the F32 tensor data an HFDir copy of the model
// opts describes would hold (and Write would build in memory), so a caller
// can warn before setting HFForce.
func HFBytes(opts Options) (int64, error) {
	s, err := LookupShape(opts.Arch, opts.Shape)
	if err != nil {
		return 0, err
	}
	specs, err := Layout(s, opts.Type)
	if err != nil {
		return 0, err
	}
	var n int64
	for i := range specs {
		if specs[i].HFName != "" {
			n += 4 * specs[i].Elems()
		}
	}
	return n, nil
}

func dataBytes(specs []TensorSpec) (int64, error) {
	var total int64
	for i := range specs {
		n, err := specs[i].Type.TensorBytes(specs[i].Dims)
		if err != nil {
			return 0, fmt.Errorf("synth: tensor %s: %w", specs[i].Name, err)
		}
		total += n
	}
	return total, nil
}

// Write writes the model opts describes to path as GGUF (version 3), and
// to opts.HFDir when set. The GGUF is written to path+".tmp", synced and
// renamed, so a failure leaves no file at path and removes the temporary.
func Write(path string, opts Options) (err error) {
	p, err := newPlan(opts)
	if err != nil {
		return err
	}
	f, err := safefs.CreateTemp(path, 0o644)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := p.writeGGUF(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("synth: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("synth: close %s: %w", tmp, err)
	}
	if opts.HFDir != "" {
		if err := p.writeHF(opts.HFDir); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// writeGGUF streams the GGUF image to out. Tensor data is generated in
// parallel chunks ahead of the sequential writer.
func (p *plan) writeGGUF(out io.Writer) (int64, error) {
	w := gguf.NewWriter(3)
	for _, e := range metadata(p.shape, p.opts.Type, p.vocab) {
		if err := w.AddKV(e.key, e.value); err != nil {
			return 0, fmt.Errorf("synth: %w", err)
		}
	}
	for _, t := range p.specs {
		if err := w.AddTensor(t.Name, t.Type, t.Dims); err != nil {
			return 0, fmt.Errorf("synth: %w", err)
		}
	}
	total, err := dataBytes(p.specs)
	if err != nil {
		return 0, err
	}
	var done int64
	progress := func(n int64) {
		done += n
		if p.opts.Progress != nil {
			p.opts.Progress(done, total)
		}
	}
	pl := startPipeline(&p.shape, p.specs, p.opts.Seed)
	n, err := w.WriteTo(out, func(i int, ti gguf.TensorInfo, dst io.Writer) error {
		return pl.writeTensor(i, dst, progress)
	})
	pl.stop()
	if err != nil {
		return n, fmt.Errorf("synth: %w", err)
	}
	if done != total {
		return n, errors.New("synth: internal error: not every tensor chunk was written")
	}
	return n, nil
}
