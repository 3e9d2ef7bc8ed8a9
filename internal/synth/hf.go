package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// UnpermuteRows undoes llama.cpp's attn_q/attn_k row permutation: given
// rows in GGUF order (rows of rowLen values, heads of headDim rows each),
// it returns them in Hugging Face order, using
// GGUF row h*hd + 2*i + j == HF row h*hd + j*(hd/2) + i.
func UnpermuteRows(gg []float32, rowLen, headDim int) ([]float32, error) {
	if rowLen <= 0 || headDim <= 0 || headDim%2 != 0 || len(gg)%(rowLen*headDim) != 0 {
		return nil, fmt.Errorf("synth: cannot unpermute %d values as rows of %d in heads of %d", len(gg), rowLen, headDim)
	}
	heads := len(gg) / (rowLen * headDim)
	half := headDim / 2
	out := make([]float32, len(gg))
	for h := 0; h < heads; h++ {
		for i := 0; i < half; i++ {
			for j := 0; j < 2; j++ {
				g := h*headDim + 2*i + j
				r := h*headDim + j*half + i
				copy(out[r*rowLen:(r+1)*rowLen], gg[g*rowLen:(g+1)*rowLen])
			}
		}
	}
	return out, nil
}

// hfTensors returns tensor i as its Hugging Face F32 counterparts: one
// tensor, or for merged expert weights one per expert.
func (p *plan) hfTensors(i int) ([]safetensors.Tensor, error) {
	t, err := p.hfTensor(i)
	if err != nil || !p.specs[i].hfExperts {
		return []safetensors.Tensor{t}, err
	}
	n := int(t.Shape[0])
	slab := len(t.Data) / n
	out := make([]safetensors.Tensor, n)
	for e := range out {
		out[e] = safetensors.Tensor{Name: fmt.Sprintf(t.Name, e), DType: t.DType, Shape: t.Shape[1:],
			Data: t.Data[e*slab : (e+1)*slab]}
	}
	return out, nil
}

// hfTensor returns tensor i as its Hugging Face F32 counterpart.
func (p *plan) hfTensor(i int) (safetensors.Tensor, error) {
	spec := &p.specs[i]
	var vals []float32
	switch spec.kind {
	case kindNorm:
		w, err := normValues(p.opts.Seed, i, int(spec.Elems()), spec.normOffset)
		if err != nil {
			return safetensors.Tensor{}, err
		}
		// GGUF holds float32(1 + w). Llama's and Qwen's HF norm is that
		// same value; Gemma's HF norm is w, to which transformers adds 1
		// in float32.
		if !p.shape.gemma() {
			for j := range w {
				w[j] = 1 + w[j]
			}
		}
		vals = w
	default:
		raw, err := tensorBytes(&p.shape, p.specs, p.opts.Seed, i)
		if err != nil {
			return safetensors.Tensor{}, err
		}
		vals = make([]float32, spec.Elems())
		if err := quant.Dequantize(spec.Type, raw, vals); err != nil {
			return safetensors.Tensor{}, fmt.Errorf("synth: tensor %s: %w", spec.Name, err)
		}
		if spec.permuteHeadDim > 0 {
			vals, err = UnpermuteRows(vals, int(spec.Dims[0]), spec.permuteHeadDim)
			if err != nil {
				return safetensors.Tensor{}, err
			}
		}
	}
	shape := make([]int64, len(spec.Dims))
	for k, d := range spec.Dims {
		shape[len(shape)-1-k] = int64(d)
	}
	data := make([]byte, 4*len(vals))
	for j, v := range vals {
		binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(v))
	}
	return safetensors.Tensor{Name: spec.HFName, DType: "F32", Shape: shape, Data: data}, nil
}

// writeHF writes the Hugging Face directory.
func (p *plan) writeHF(dir string) error {
	var ts []safetensors.Tensor
	for i := range p.specs {
		if p.specs[i].HFName == "" {
			continue
		}
		t, err := p.hfTensors(i)
		if err != nil {
			return err
		}
		ts = append(ts, t...)
	}
	shard := p.opts.HFMaxShardBytes
	if shard == 0 {
		shard = DefaultHFShardBytes
	}
	if err := safetensors.WriteDir(dir, HFConfig(p.shape, p.vocab), ts, shard); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return writeHFTokenizer(dir, p.vocab)
}

// TokenizerVocab returns v as the tokenizer package's vocabulary, as
// tokenizer.VocabFromGGUF reads it from the GGUF metadata synth writes.
func TokenizerVocab(v *Vocab) *tokenizer.Vocab {
	tv := &tokenizer.Vocab{
		Model: v.Model, Pre: v.Pre, Tokens: v.Tokens, Types: v.Types, Merges: v.Merges, Scores: v.Scores,
		BOS: int32(v.BOS), EOS: int32(v.EOS), EOT: -1, PAD: int32(v.PAD), UNK: int32(v.UNK),
		AddBOS: !v.NoBOS, AddSpacePrefix: v.Model == tokenizer.ModelLlama && v.AddSpacePrefix, ChatTemplate: v.ChatTemplate,
	}
	return tv
}

// writeHFTokenizer writes the twin's tokenizer.json, tokenizer_config.json
// and generation_config.json, so that the directory is a whole model.
func writeHFTokenizer(dir string, v *Vocab) error {
	tj, cj, err := tokenizer.HFJSON(TokenizerVocab(v))
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	gj, err := json.MarshalIndent(map[string]any{"_from_model_config": true, "bos_token_id": v.BOS, "eos_token_id": v.EOS}, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cj, "generation_config.json": gj} {
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	return nil
}
