package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/hf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Engine is a loaded model ready to run forward passes. Passes are
// serialised by the backend; the scheduler (internal/daemon/sched) batches
// requests over them.
type Engine struct {
	path  string
	file  *gguf.Mapped
	pool  *prefab.Pool // set instead of file when opened from a prefab pool
	hfDir *hf.Model    // set instead of file when opened from a Hugging Face directory
	Model *model.Model
	Tok   *tokenizer.Tokenizer

	plan  *tier.Plan       // set by OpenWith
	pipe  *stream.Pipeline // set when some layers stream on the CPU
	src   tier.Source      // the pipeline's tier-C source, if any
	route Route            // how tier-C layers are read (zero: none on tier C)
	// experts serves a MoE pool's experts when some stay on storage
	// (expertPlan says which).
	experts    *expertStore
	expertPlan *tier.ExpertPlan
	// deviceExperts is, on a GPU, the device memory the plan leaves for
	// resident experts (expertPlan.Device says which; 0: none), and
	// expertSizes the experts' sizes they are placed by.
	deviceExperts int64
	expertSizes   [][]int64
	// adapter moves the device's experts by the routing served (nil:
	// they stay where the load placed them); xmu guards expertPlan's
	// device fields, which it changes.
	adapter *deviceAdapter
	xmu     sync.Mutex
	// xbase is the experts' report once the load's calibration ran:
	// Experts and ExpertStats count serving since (ExpertInfo.Since), not
	// the calibration text's passes and placement.
	xbase ExpertInfo

	backend Backend     // the backend passes run on (cpuBackend unless the GPU took the model)
	binfo   BackendInfo // what backend, on what, and why
	cuda    *gpu.Model
	dev     *cudadrv.Device // owned: opened for this engine
	skipped []int           // layers every pass leaves out (Options.Skip)
}

// Open maps a GGUF model, a prefab pool (told apart by the pool's magic)
// or a Hugging Face model directory (one holding config.json) and prepares
// it for generation on the CPU backend (never the GPU: it is the reference
// path; OpenWith picks a backend). Cancelling ctx stops it between reads
// (a pool's extents are verified one by one) with an error wrapping ctx's.
func Open(ctx context.Context, path string) (*Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	if hf.IsDir(path) {
		return openHF(ctx, path)
	}
	if ok, _ := prefab.IsPool(path); ok {
		return OpenPool(ctx, path)
	}
	m, err := new(Options).mapGGUF(path)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	e, err := fromMapped(ctx, path, m)
	if err != nil {
		m.Close()
		return nil, err
	}
	return e, nil
}

// fromMapped builds the CPU engine over a GGUF mapping: the tensors are
// views of it, so nothing is read here but the metadata.
func fromMapped(ctx context.Context, path string, m *gguf.Mapped) (*Engine, error) {
	v, err := tokenizer.VocabFromGGUF(m.File)
	if err != nil {
		return nil, fmt.Errorf("model %s: reading tokenizer: %w", path, err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		return nil, fmt.Errorf("model %s: building tokenizer: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	mod, err := model.LoadGGUF(m)
	if err != nil {
		return nil, fmt.Errorf("model %s: loading weights: %w", path, err)
	}
	if tok.VocabSize() != mod.Config.Vocab {
		return nil, fmt.Errorf("model %s: tokenizer has %d tokens but the model's vocabulary is %d", path, tok.VocabSize(), mod.Config.Vocab)
	}
	return newCPUEngine(&Engine{path: path, file: m, Model: mod, Tok: tok}), nil
}

// openHF builds the CPU engine over a Hugging Face directory: its
// weights are views of the safetensors files' copy in memory where their
// bytes need no change (engine/hf), once they fit the memory available.
func openHF(ctx context.Context, path string) (*Engine, error) {
	m, err := new(Options).openHF(path)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	e, err := fromHF(ctx, path, m)
	if err != nil {
		m.Close()
		return nil, err
	}
	return e, nil
}

// fromHF builds the CPU engine over an opened Hugging Face directory.
func fromHF(ctx context.Context, path string, m *hf.Model) (*Engine, error) {
	tok, err := tokenizer.New(m.Vocab)
	if err != nil {
		return nil, fmt.Errorf("model %s: building tokenizer: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	if tok.VocabSize() != m.Model.Config.Vocab {
		return nil, fmt.Errorf("model %s: tokenizer has %d tokens but the model's vocabulary is %d", path, tok.VocabSize(), m.Model.Config.Vocab)
	}
	return newCPUEngine(&Engine{path: path, hfDir: m, Model: m.Model, Tok: tok}), nil
}

// newCPUEngine installs the CPU backend on e.
// The model's matrix products run engine/gemv's best kernels for this CPU.
func newCPUEngine(e *Engine) *Engine {
	e.backend = cpuBackend{e}
	e.binfo = BackendInfo{Name: BackendCPU, Requested: BackendCPU}
	e.useCPUKernels(gemv.Detect())
	return e
}

// UseCPUKernels has the CPU backend's passes run the kernel family impl
// (one this CPU runs) in place of the best one: what a bench compares,
// or a host without a family's kernels would run.
func (e *Engine) UseCPUKernels(impl gemv.Impl) error {
	if e.binfo.Name != BackendCPU {
		return fmt.Errorf("cpu kernels %v: the model runs on the %s backend", impl, e.binfo.Name)
	}
	if !slices.Contains(gemv.Impls(), impl) {
		return fmt.Errorf("cpu kernels %v: this CPU runs %v", impl, gemv.Impls())
	}
	e.useCPUKernels(impl)
	return nil
}

func (e *Engine) useCPUKernels(impl gemv.Impl) {
	e.Model.UseGEMV(impl)
	kernels := "gemv " + impl.String()
	if gemv.Tiled(impl, quant.Q4_K) {
		kernels += ", prompts on AMX tiles"
	}
	e.binfo.Kernels = kernels
}

// Close releases the GPU side (the model's device memory and the device),
// stops the streaming pipeline, if any, and releases its source and the
// model's mapping. No Forward may be running; the Engine must not be used
// after.
func (e *Engine) Close() error {
	var errs []error
	if e.adapter != nil {
		e.adapter.close()
		e.adapter = nil
	}
	errs = append(errs, e.closeCUDA())
	if e.pipe != nil {
		e.Model.SetLayerSource(nil)
		errs = append(errs, e.pipe.Close())
		e.pipe = nil
	}
	if e.experts != nil {
		e.Model.SetExpertSource(nil)
		errs = append(errs, e.experts.close())
		e.experts = nil
	}
	if e.src != nil {
		errs = append(errs, e.src.Close())
		e.src = nil
	}
	if e.pool != nil {
		errs = append(errs, e.pool.Close())
	} else if e.file != nil {
		errs = append(errs, e.file.Close())
	} else if e.hfDir != nil {
		errs = append(errs, e.hfDir.Close())
	}
	return errors.Join(errs...)
}

// Path is the file (or Hugging Face directory) the engine was opened from.
func (e *Engine) Path() string { return e.path }

// Skipped are the layers every pass leaves out (Options.Skip), nil when
// none.
func (e *Engine) Skipped() []int { return slices.Clone(e.skipped) }

// ErrNoHostWeights is returned by Embed for a model whose layers are not
// all in host memory (streamed from a pool): embeddings are computed on
// the CPU from the resident weights.
var ErrNoHostWeights = errors.New("the model's layers are not all in host memory")

// Embed is the embedding of tokens (model.Model.Embed: the mean final
// hidden state, unit length), computed on the CPU from the weights in
// host memory, beside whatever passes the backend runs. A model streamed
// from a pool has no such weights (ErrNoHostWeights).
func (e *Engine) Embed(ctx context.Context, tokens []int32) ([]float32, error) {
	if e.pipe != nil || e.file == nil && e.hfDir == nil && e.cuda != nil {
		return nil, fmt.Errorf("embed: %w", ErrNoHostWeights)
	}
	return e.Model.Embed(ctx, tokens)
}
