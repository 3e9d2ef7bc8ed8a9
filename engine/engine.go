// Package engine ties a model file to a runnable generator: it maps the
// GGUF (or prefab pool), builds the tokenizer from its metadata, loads the
// weights onto a backend and drives prompt processing, decoding and
// sampling. OpenWith also picks the backend (the GPU through engine/gpu
// when CUDA is usable, else the CPU reference engine/model, or whichever
// Options.Backend forces), places the layers with the tier planner
// (engine/tier) and streams those that do not fit the memory budgets:
// over PCIe from pinned host memory on the GPU, through the pipeline
// (engine/stream) on the CPU, once per batched pass. Passes go through
// one interface, Backend, so Generate and the daemon's scheduler run the
// same way on either. The daemon and `strata run` both go through it, so
// everything that turns "text in" into "tokens out" lives behind this one
// API.
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Engine is a loaded model ready to generate. It is safe for one generation
// at a time; the daemon's scheduler serialises or batches requests.
type Engine struct {
	path  string
	file  *gguf.Mapped
	pool  *prefab.Pool // set instead of file when opened from a prefab pool
	Model *model.Model
	Tok   *tokenizer.Tokenizer

	plan *tier.Plan       // set by OpenWith
	pipe *stream.Pipeline // set when some layers stream on the CPU
	src  tier.Source      // the pipeline's tier-C source, if any

	backend Backend     // the backend passes run on (cpuBackend unless the GPU took the model)
	binfo   BackendInfo // what backend, on what, and why
	cuda    *gpu.Model
	dev     *cudadrv.Device // owned: opened for this engine
}

// Open maps a GGUF model or a prefab pool (told apart by the pool's magic)
// and prepares it for generation on the CPU backend (never the GPU: it is
// the reference path; OpenWith picks a backend).
func Open(path string) (*Engine, error) {
	if ok, _ := prefab.IsPool(path); ok {
		return OpenPool(path)
	}
	m, err := gguf.Map(path)
	if err != nil {
		return nil, fmt.Errorf("opening model %s: %w", path, err)
	}
	e, err := fromMapped(path, m)
	if err != nil {
		m.Close()
		return nil, err
	}
	return e, nil
}

func fromMapped(path string, m *gguf.Mapped) (*Engine, error) {
	v, err := tokenizer.VocabFromGGUF(m.File)
	if err != nil {
		return nil, fmt.Errorf("model %s: reading tokenizer: %w", path, err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		return nil, fmt.Errorf("model %s: building tokenizer: %w", path, err)
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

// newCPUEngine installs the CPU backend on e.
func newCPUEngine(e *Engine) *Engine {
	e.backend = cpuBackend{e}
	e.binfo = BackendInfo{Name: BackendCPU, Requested: BackendCPU}
	return e
}

// Close releases the GPU side (the model's device memory and the device),
// stops the streaming pipeline, if any, and releases its source and the
// model's mapping. No Generate or Forward may be running; the Engine must
// not be used after.
func (e *Engine) Close() error {
	var errs []error
	errs = append(errs, e.closeCUDA())
	if e.pipe != nil {
		e.Model.SetLayerSource(nil)
		errs = append(errs, e.pipe.Close())
		e.pipe = nil
	}
	if e.src != nil {
		errs = append(errs, e.src.Close())
		e.src = nil
	}
	if e.pool != nil {
		errs = append(errs, e.pool.Close())
	} else if e.file != nil {
		errs = append(errs, e.file.Close())
	}
	return errors.Join(errs...)
}

// Path is the file the engine was opened from.
func (e *Engine) Path() string { return e.path }

// Request is one generation: a prompt already rendered to text (or token
// ids), the sampling parameters and the limits.
type Request struct {
	// Prompt is encoded with the model's tokenizer. When Raw is false the
	// BOS rule of the vocabulary applies; chat prompts rendered by the
	// template already carry BOS and set Templated.
	Prompt    string
	Tokens    []int32 // used instead of Prompt when non-nil
	Templated bool    // prompt came from ApplyChatTemplate: parse special tokens, add none
	MaxTokens int
	Sample    sample.Params
	Stop      []string // generation ends when the text ends with one of these
	MaxCtx    int      // KV-cache capacity; 0 = prompt + MaxTokens
}

// Token is one generated token as it is streamed out.
type Token struct {
	ID   int32
	Text string // the complete UTF-8 that this token finished (may be empty)
}

// Result summarises a finished generation.
type Result struct {
	PromptTokens     int
	CompletionTokens int
	FinishReason     string // "stop" (EOG token or stop string) or "length"
	Text             string
	PromptTime       time.Duration
	DecodeTime       time.Duration
}

// ErrContext is returned when prompt plus completion would not fit the
// model's context.
var ErrContext = errors.New("context length exceeded")

// Encode turns a request's prompt into token ids.
func (e *Engine) Encode(r *Request) []int32 {
	if r.Tokens != nil {
		return r.Tokens
	}
	if r.Templated {
		return e.Tok.Encode(r.Prompt, false, true)
	}
	return e.Tok.Encode(r.Prompt, true, false)
}

// Generate runs prompt processing and then decodes up to r.MaxTokens tokens,
// calling emit for each (emit may return an error to stop early, e.g. when a
// client disconnects). It returns what was generated even on error.
func (e *Engine) Generate(ctx context.Context, r Request, emit func(Token) error) (Result, error) {
	var res Result
	ids := e.Encode(&r)
	if len(ids) == 0 {
		return res, errors.New("empty prompt")
	}
	res.PromptTokens = len(ids)
	if r.MaxTokens <= 0 {
		return res, fmt.Errorf("max tokens must be positive, got %d", r.MaxTokens)
	}
	need := len(ids) + r.MaxTokens
	limit := e.MaxContext()
	if need > limit {
		if len(ids) >= limit {
			return res, fmt.Errorf("%w: prompt has %d tokens, the model's context is %d", ErrContext, len(ids), limit)
		}
		r.MaxTokens = limit - len(ids)
		need = limit
	}
	if r.MaxCtx > 0 && r.MaxCtx < need {
		need = r.MaxCtx
	}
	smp, err := sample.New(r.Sample)
	if err != nil {
		return res, fmt.Errorf("sampling parameters: %w", err)
	}
	seq, err := e.NewSequence(need)
	if err != nil {
		return res, fmt.Errorf("prompt: %w", err)
	}
	defer seq.Close()
	history := append([]int32(nil), ids...)
	// An exactly greedy sampler takes the backend's Step.Token (selected
	// on the GPU where it can be) instead of sampling the logits here.
	greedy := GreedyOnly(r.Sample)

	t0 := time.Now()
	batch := []Step{{Seq: seq, Tokens: ids, Greedy: greedy}}
	if err := e.Forward(ctx, batch); err != nil {
		return res, fmt.Errorf("prompt: %w", err)
	}
	res.PromptTime = time.Since(t0)
	var logits []float32
	if !greedy {
		logits = batch[0].Logits[len(batch[0].Logits)-1]
	}

	dec := e.Tok.NewDecoder()
	t1 := time.Now()
	res.FinishReason = "length"
	for i := 0; i < r.MaxTokens; i++ {
		id := batch[0].Token
		if !greedy {
			id = smp.Sample(logits, history)
		}
		history = append(history, id)
		if e.Tok.IsEOG(id) {
			res.FinishReason = "stop"
			break
		}
		res.CompletionTokens++
		piece := dec.Add(id)
		res.Text += piece
		stopped := false
		if s, ok := matchStop(res.Text, r.Stop); ok {
			// Trim the stop string and whatever this piece carried past it.
			cut := len(res.Text) - len(piece)
			res.Text = res.Text[:s]
			if s >= cut {
				piece = res.Text[cut:]
			} else {
				piece = ""
			}
			stopped = true
		}
		if err := emit(Token{ID: id, Text: piece}); err != nil {
			res.DecodeTime = time.Since(t1)
			return res, err
		}
		if stopped {
			res.FinishReason = "stop"
			break
		}
		if i == r.MaxTokens-1 || seq.Pos() >= need {
			break
		}
		batch[0] = Step{Seq: seq, Tokens: []int32{id}, Logits: batch[0].Logits, Greedy: greedy}
		if err := e.Forward(ctx, batch); err != nil {
			res.DecodeTime = time.Since(t1)
			return res, fmt.Errorf("decoding token %d: %w", i+1, err)
		}
		if !greedy {
			logits = batch[0].Logits[0]
		}
	}
	if tail := dec.Flush(); tail != "" && res.FinishReason == "length" {
		res.Text += tail
		_ = emit(Token{ID: -1, Text: tail})
	}
	res.DecodeTime = time.Since(t1)
	return res, nil
}

// matchStop reports the byte index where the first stop string occurs in s.
func matchStop(s string, stops []string) (int, bool) {
	best := -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(s, st); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}
