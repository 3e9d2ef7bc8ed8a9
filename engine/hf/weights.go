package hf

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/internal/hostmem"
)

// HF tensor names outside the layers, after the text model's prefix.
const (
	embedName  = "embed_tokens.weight"
	normName   = "norm.weight"
	outputName = "lm_head.weight"
)

// textPrefixes are where checkpoints keep the text model's tensors: a
// causal LM's "model.", and in a Gemma 3 checkpoint with a vision tower
// the language model's (as the hub's files and as transformers 4.52 and
// later save them).
var textPrefixes = []string{"model.", "language_model.model.", "model.language_model."}

// tensors is the part of safetensors.Model the loader reads; tests give
// hand-made maps.
type tensors interface {
	Tensor(name string) (safetensors.Tensor, error)
}

// loader builds the engine's weights from the HF tensors of one spec.
type loader struct {
	s  *spec
	st tensors
	// prefix is textPrefixes' entry the checkpoint uses.
	prefix string
}

// hfLayerName maps a layer role (its GGUF suffix) to the HF tensor name
// after "model.layers.N.".
func (s *spec) hfLayerName(suffix string) (string, error) {
	switch suffix {
	case "attn_norm.weight":
		return "input_layernorm.weight", nil
	case "attn_q.weight":
		return "self_attn.q_proj.weight", nil
	case "attn_k.weight":
		return "self_attn.k_proj.weight", nil
	case "attn_v.weight":
		return "self_attn.v_proj.weight", nil
	case "attn_qkv.weight":
		return "self_attn.qkv_proj.weight", nil
	case "attn_q.bias":
		return "self_attn.q_proj.bias", nil
	case "attn_k.bias":
		return "self_attn.k_proj.bias", nil
	case "attn_v.bias":
		return "self_attn.v_proj.bias", nil
	case "attn_q_norm.weight":
		return "self_attn.q_norm.weight", nil
	case "attn_k_norm.weight":
		return "self_attn.k_norm.weight", nil
	case "attn_output.weight":
		return "self_attn.o_proj.weight", nil
	case "post_attention_norm.weight":
		return "post_attention_layernorm.weight", nil
	case "ffn_norm.weight":
		if s.cfg.PostNorms() {
			return "pre_feedforward_layernorm.weight", nil
		}
		return "post_attention_layernorm.weight", nil
	case "ffn_gate_inp.weight":
		return s.moe + "gate.weight", nil
	case "ffn_gate.weight":
		return "mlp.gate_proj.weight", nil
	case "ffn_up.weight":
		if s.cfg.Fused() {
			return "mlp.gate_up_proj.weight", nil
		}
		return "mlp.up_proj.weight", nil
	case "ffn_down.weight":
		return "mlp.down_proj.weight", nil
	case "post_ffw_norm.weight":
		return "post_feedforward_layernorm.weight", nil
	}
	return "", fmt.Errorf("internal error: no Hugging Face name for layer tensor %s", suffix)
}

// weights reads every tensor the spec's architecture needs. cfg.Vocab
// comes from the embedding, which must agree with config.json.
func (l *loader) weights() (*model.Weights, error) {
	c := &l.s.cfg
	var emb safetensors.Tensor
	err := fmt.Errorf("missing tensor %s", textPrefixes[0]+embedName)
	for _, p := range textPrefixes {
		if emb, err = l.st.Tensor(p + embedName); err == nil {
			l.prefix = p
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("missing tensor %s", textPrefixes[0]+embedName)
	}
	if len(emb.Shape) != 2 || emb.Shape[1] != int64(c.Dim) {
		return nil, fmt.Errorf("tensor %s has shape %v, want [vocab, %d]", emb.Name, emb.Shape, c.Dim)
	}
	if emb.Shape[0] != int64(c.Vocab) {
		return nil, fmt.Errorf("tensor %s has %d rows but config.json's vocab_size is %d", emb.Name, emb.Shape[0], c.Vocab)
	}
	w := &model.Weights{Layers: make([]model.Layer, c.Layers)}
	if w.Embed, err = l.matrix(l.prefix+embedName, "token_embd.weight", c.Vocab, c.Dim, 0); err != nil {
		return nil, err
	}
	if w.OutputNorm, err = l.vector(l.prefix+normName, "output_norm.weight", c.Dim); err != nil {
		return nil, err
	}
	if c.TiedOutput {
		w.Output = w.Embed
	} else if w.Output, err = l.matrix(outputName, "output.weight", c.Vocab, c.Dim, 0); err != nil {
		return nil, fmt.Errorf("%w (config.json's tie_word_embeddings is false)", err)
	}
	roles := c.LayerRoles()
	for i := range w.Layers {
		p := l.prefix + "layers." + strconv.Itoa(i) + "."
		g := "blk." + strconv.Itoa(i) + "."
		ly := &w.Layers[i]
		for _, r := range roles {
			name, err := l.s.hfLayerName(r.Suffix)
			if err != nil {
				return nil, err
			}
			var t model.Tensor
			if r.Vector {
				t, err = l.vector(p+name, g+r.Suffix, r.Cols)
			} else {
				perm := 0
				if l.s.permuteQK && (r.Suffix == "attn_q.weight" || r.Suffix == "attn_k.weight") {
					perm = c.HeadDim
				}
				t, err = l.matrix(p+name, g+r.Suffix, r.Rows, r.Cols, perm)
			}
			if err != nil {
				return nil, err
			}
			*r.Field(ly) = t
		}
		if c.MoE() {
			if ly.Experts, err = l.experts(i); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// experts reads layer i's experts, one HF module each.
func (l *loader) experts(i int) ([]model.Expert, error) {
	c := &l.s.cfg
	d, f := c.Dim, c.ExpertFFN
	out := make([]model.Expert, c.Experts)
	merged := [3]string{"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}
	for e := range out {
		p := l.prefix + "layers." + strconv.Itoa(i) + "." + l.s.moe + "experts." + strconv.Itoa(e) + "."
		fields := [3]*model.Tensor{&out[e].Gate, &out[e].Up, &out[e].Down}
		for k, name := range l.s.moeNames {
			rows, cols := f, d
			if k == 2 {
				rows, cols = d, f
			}
			t, err := l.matrix(p+name+".weight", fmt.Sprintf("blk.%d.%s[%d]", i, merged[k], e), rows, cols, 0)
			if err != nil {
				return nil, err
			}
			*fields[k] = t
		}
	}
	return out, nil
}

// matrixType maps a safetensors dtype to the engine's element type.
func matrixType(t safetensors.Tensor) (quant.Type, error) {
	switch t.DType {
	case "F32":
		return quant.F32, nil
	case "F16":
		return quant.F16, nil
	case "BF16":
		return quant.BF16, nil
	}
	return 0, fmt.Errorf("tensor %s: dtype %s: %w (strata loads F32, F16 and BF16 checkpoints)", t.Name, t.DType, ErrUnsupported)
}

// matrix reads the HF tensor name of shape [rows, cols] as the engine's
// tensor ggufName. Its bytes stay a view of the mapping unless llama's
// q/k rows must be permuted (permHead, the head size) or the view would
// be misaligned for its elements.
func (l *loader) matrix(name, ggufName string, rows, cols, permHead int) (model.Tensor, error) {
	t, err := l.st.Tensor(name)
	if err != nil {
		return model.Tensor{}, fmt.Errorf("missing tensor %s", name)
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(rows) || t.Shape[1] != int64(cols) {
		return model.Tensor{}, fmt.Errorf("tensor %s has shape %v, want [%d, %d]", name, t.Shape, rows, cols)
	}
	typ, err := matrixType(t)
	if err != nil {
		return model.Tensor{}, err
	}
	data := t.Data
	if permHead > 0 {
		if data, err = permuteRows(data, rows, permHead); err != nil {
			return model.Tensor{}, fmt.Errorf("tensor %s: %w", name, err)
		}
	} else if !hostmem.Aligned(data, 4) {
		data = append([]byte(nil), data...)
	}
	return model.Tensor{Name: ggufName, Type: typ, Rows: rows, Cols: cols, Data: data}, nil
}

// permuteRows returns data's rows (rows of equal size) in llama.cpp's
// order for a q or k projection: within each head of headDim rows, the
// GGUF row 2i+j is the HF row j*headDim/2+i, so that RoPE's pairs are
// adjacent rows.
func permuteRows(data []byte, rows, headDim int) ([]byte, error) {
	if headDim <= 0 || headDim%2 != 0 || rows%headDim != 0 || len(data)%rows != 0 {
		return nil, fmt.Errorf("cannot permute %d rows in heads of %d", rows, headDim)
	}
	rb := len(data) / rows
	out := make([]byte, len(data))
	half := headDim / 2
	for h := 0; h < rows; h += headDim {
		for i := range half {
			for j := range 2 {
				g, r := h+2*i+j, h+j*half+i
				copy(out[g*rb:(g+1)*rb], data[r*rb:(r+1)*rb])
			}
		}
	}
	return out, nil
}

// vector reads a norm or bias of n values as F32 (the engine keeps them
// so): converted from F16 or BF16, and for Gemma's norms stored as w
// turned into the scale 1 + w, computed in float32 as transformers does.
func (l *loader) vector(name, ggufName string, n int) (model.Tensor, error) {
	t, err := l.st.Tensor(name)
	if err != nil {
		return model.Tensor{}, fmt.Errorf("missing tensor %s", name)
	}
	if len(t.Shape) != 1 || t.Shape[0] != int64(n) {
		return model.Tensor{}, fmt.Errorf("tensor %s has shape %v, want [%d]", name, t.Shape, n)
	}
	if _, err := matrixType(t); err != nil {
		return model.Tensor{}, err
	}
	offset := l.s.unitOffsetNorms && strings.HasSuffix(name, "norm.weight")
	if t.DType == "F32" && !offset && hostmem.Aligned(t.Data, 4) {
		return model.Tensor{Name: ggufName, Type: quant.F32, Rows: 1, Cols: n, Data: t.Data}, nil
	}
	vals, err := t.Float32s()
	if err != nil {
		return model.Tensor{}, err
	}
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		if offset {
			v = 1 + v
		}
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return model.Tensor{Name: ggufName, Type: quant.F32, Rows: 1, Cols: n, Data: b}, nil
}
