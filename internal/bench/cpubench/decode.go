package cpubench

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// Decode is a model's CPU-only decode: the engine's CPU backend (every
// layer resident, engine/gemv's kernels) generating greedily after a short
// prompt, as `strata run --backend cpu` does.
type Decode struct {
	Model  string `json:"model"`
	Tokens int    `json:"tokens"`
	// TokensPerSecond is the decode rate (prompt excluded); WeightBytes
	// what each step reads (the file's tensors less the embedding rows it
	// does not touch is close enough: every matrix is read once a step;
	// of a mixture-of-experts model's experts, those the request's tokens
	// were routed to, on average: RoutedBytes), and BytesPerSecond their
	// product.
	TokensPerSecond float64 `json:"tokens_per_second"`
	WeightBytes     int64   `json:"weight_bytes"`
	RoutedBytes     int64   `json:"routed_expert_bytes,omitempty"`
	BytesPerSecond  float64 `json:"weight_bytes_per_s"`
	// Ratio is BytesPerSecond over the memory read rate with every thread.
	Ratio   float64 `json:"ratio"`
	Kernels string  `json:"kernels"`
	// PromptTokens is the prompt of the prefill request timed after the
	// decode (0: none), PrefillTokensPerSecond its rate: a request's
	// prompt tokens, which take the CPU's tile path where it has one.
	PromptTokens           int     `json:"prompt_tokens,omitempty"`
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second,omitempty"`
	// ContextTokensPerSecond is the decode rate after that prompt, over
	// its few generated tokens: the attention reads the prompt's keys
	// and values every step, which a decode after a short prompt does not
	// show.
	ContextTokensPerSecond float64 `json:"context_decode_tokens_per_second,omitempty"`
}

// contextTokens is how many tokens the prefill request generates after
// its prompt, to time decode at the prompt's length.
const contextTokens = 8

// MeasureDecode runs the model at path on the CPU backend for tokens
// greedy tokens after an 8-token prompt, then (prefill > 0) a request of
// a prefill-token prompt (as long as the model's context leaves room for)
// that generates a few tokens after it, on the kernel family impl ("" the
// best this CPU runs: see Options.Impl); read is the memory read rate the
// ratio is taken to (0 leaves it out).
func MeasureDecode(ctx context.Context, path string, tokens, prefill int, impl string, read float64) (*Decode, error) {
	if tokens < 1 || prefill < 0 {
		return nil, fmt.Errorf("%w: decode of %d tokens, prefill of %d", ErrBadOptions, tokens, prefill)
	}
	family, err := parseImpl(impl)
	if err != nil {
		return nil, err
	}
	e, err := engine.OpenWith(ctx, path, engine.Options{Backend: engine.BackendCPU, Context: max(tokens, prefill) + 16})
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	defer e.Close()
	if err := e.UseCPUKernels(family); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	w := e.Model.Weights
	bytes := st.Size() - int64(len(w.Embed.Data))
	if &w.Output.Data[0] == &w.Embed.Data[0] { // tied: the table is the output matrix too
		bytes += int64(len(w.Embed.Data))
	}
	prompt := e.Tok.Encode("The CPU reads every weight once a token", true, false)
	if len(prompt) > 8 {
		prompt = prompt[:8]
	}
	// A warm-up request maps the file's pages in; the measured one follows.
	req := sched.Request{Prompt: prompt, MaxTokens: 4, Sample: sample.Greedy()}
	if _, err := sched.Generate(ctx, e.Backend(), e.Tok, req, nil); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	req.MaxTokens = tokens
	before := e.Model.ExpertCounts()
	res, err := sched.Generate(ctx, e.Backend(), e.Tok, req, nil)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	d := &Decode{Model: path, Tokens: res.CompletionTokens, WeightBytes: bytes, Kernels: e.BackendInfo().Kernels}
	if before != nil {
		// Every token the request ran (the prompt's and each one fed
		// back) was routed once per layer.
		all, routed := routedBytes(e.Model.Weights.Layers, before, e.Model.ExpertCounts(), len(prompt)+res.CompletionTokens-1)
		d.RoutedBytes = routed
		d.WeightBytes = bytes - all + routed
	}
	// The decode time runs from the end of the prompt: the first token's
	// pass was the prompt's, so the rest are decode steps.
	if res.DecodeTime > 0 && res.CompletionTokens > 1 {
		d.TokensPerSecond = float64(res.CompletionTokens-1) / res.DecodeTime.Seconds()
	}
	d.BytesPerSecond = d.TokensPerSecond * float64(d.WeightBytes)
	if read > 0 {
		d.Ratio = d.BytesPerSecond / read
	}
	// A prompt with room for the token it asks for, in the model's
	// context (a small model's may be shorter than asked).
	after := min(contextTokens, tokens)
	prefill = min(prefill, e.Backend().MaxContext()-1-after)
	if prefill > 0 {
		// The text's first token, then the rest of it over and over: the
		// rate of a long prompt depends on its length, not on what it says.
		long, rest := make([]int32, 0, prefill+len(prompt)), prompt[min(1, len(prompt)-1):]
		long = append(long, prompt[0])
		for len(long) < prefill {
			long = append(long, rest...)
		}
		long = long[:prefill]
		res, err := sched.Generate(ctx, e.Backend(), e.Tok, sched.Request{Prompt: long, MaxTokens: 1 + after, Sample: sample.Greedy()}, nil)
		if err != nil {
			return nil, fmt.Errorf("prefill: %w", err)
		}
		if res.PromptTime > 0 {
			d.PromptTokens, d.PrefillTokensPerSecond = res.PromptTokens, float64(res.PromptTokens)/res.PromptTime.Seconds()
		}
		if res.DecodeTime > 0 && res.CompletionTokens > 1 {
			d.ContextTokensPerSecond = float64(res.CompletionTokens-1) / res.DecodeTime.Seconds()
		}
	}
	return d, nil
}

// routedBytes returns the bytes of every expert of layers and the bytes of
// the experts tokens routed to, per token on average, from the routing
// counts before and after they ran.
func routedBytes(layers []model.Layer, before, after [][]uint64, tokens int) (all, routed int64) {
	var sum float64
	for l := range layers {
		for x := range layers[l].Experts {
			n := layers[l].Experts[x].Bytes()
			all += n
			sum += float64(after[l][x]-before[l][x]) * float64(n)
		}
	}
	if tokens > 0 {
		routed = int64(sum / float64(tokens))
	}
	return all, routed
}

// writeDecode prints the decode line of the text report.
func writeDecode(w io.Writer, d *Decode) {
	fmt.Fprintf(w, "\nCPU-only decode of %s (%s): %.2f tokens/s over %d tokens, %s a token read at %s GB/s",
		d.Model, d.Kernels, d.TokensPerSecond, d.Tokens, tier.FormatBytes(d.WeightBytes), gb(d.BytesPerSecond))
	if d.RoutedBytes > 0 {
		fmt.Fprintf(w, " (of which %s the routed experts)", tier.FormatBytes(d.RoutedBytes))
	}
	if d.Ratio > 0 {
		fmt.Fprintf(w, " (%.2f of memory read)", d.Ratio)
	}
	fmt.Fprintln(w)
	if d.PromptTokens > 0 {
		fmt.Fprintf(w, "CPU-only prefill of a %d-token prompt: %.2f tokens/s", d.PromptTokens, d.PrefillTokensPerSecond)
		if d.ContextTokensPerSecond > 0 {
			fmt.Fprintf(w, ", then decode at that length: %.2f tokens/s", d.ContextTokensPerSecond)
		}
		fmt.Fprintln(w)
	}
}
