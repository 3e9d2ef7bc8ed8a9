package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/strata-llm/strata/engine/quant"
)

// Tensor is a weight matrix in its encoded form: Rows rows of Cols elements
// each, rows stored one after another in Type's encoding (a row occupies
// Type.RowBytes(Cols) bytes). Vectors have Rows = 1. Data is usually a
// zero-copy view into a memory-mapped file.
type Tensor struct {
	// Name is the GGUF tensor name, used in error messages.
	Name string
	// Type is the element encoding of Data.
	Type quant.Type
	// Rows and Cols give the matrix shape; Cols is the row length
	// (GGUF dims[0]).
	Rows, Cols int
	// Data holds Rows encoded rows.
	Data []byte
}

// rowBytes returns the encoded size of one row.
func (t *Tensor) rowBytes() int {
	n, _ := t.Type.RowBytes(int64(t.Cols))
	return int(n)
}

// check verifies that t has the given shape, a usable type and exactly the
// bytes that shape needs.
func (t *Tensor) check(name string, rows, cols int, floatOnly bool) error {
	if t.Name == "" {
		t.Name = name
	}
	if err := t.checkShape(rows, cols, floatOnly); err != nil {
		return fmt.Errorf("tensor %s: %w", name, err)
	}
	return nil
}

// checkShape is check without the name: the caller adds it.
func (t *Tensor) checkShape(rows, cols int, floatOnly bool) error {
	if t.Data == nil && rows > 0 {
		return errors.New("missing")
	}
	if floatOnly && t.Type != quant.F32 {
		return fmt.Errorf("type %v, want F32", t.Type)
	}
	if !t.Type.Known() {
		return fmt.Errorf("unsupported type %v", t.Type)
	}
	if t.Rows != rows || t.Cols != cols {
		return fmt.Errorf("shape %d rows x %d cols, want %d x %d", t.Rows, t.Cols, rows, cols)
	}
	rb, err := t.Type.RowBytes(int64(cols))
	if err != nil {
		return err
	}
	if want := rb * int64(rows); int64(len(t.Data)) != want {
		return fmt.Errorf("%d bytes of data, want %d", len(t.Data), want)
	}
	return nil
}

// Layer holds one transformer block's weights. Matrices follow GGUF
// orientation: Q has QDim rows of Dim columns, O has Dim rows of QDim
// columns, Gate/Up have FFN rows of Dim columns, Down has Dim rows of FFN
// columns. Norms and biases are F32 vectors. Which tensors an architecture
// has is Config.LayerRoles' answer; the others stay empty: PostAttnNorm and
// PostFFNNorm are Gemma's, QBias/KBias/VBias Qwen2's, QNorm/KNorm (HeadDim
// values, shared by every head) Qwen3's and Gemma 3's, QKV and GateUp
// Phi-3's (whose Q, K, V, Gate and Up are views of them, made by
// Config.SplitFused where a pass needs them).
//
// A mixture-of-experts layer has Router and Experts instead of Gate, Up and
// Down.
type Layer struct {
	AttnNorm, Q, K, V, O, PostAttnNorm, FFNNorm, Gate, Up, Down, PostFFNNorm Tensor
	QBias, KBias, VBias, QNorm, KNorm                                        Tensor
	QKV, GateUp                                                              Tensor
	// Router (ffn_gate_inp) has one row of Dim columns per expert: a
	// token's expert scores are its products with the normalised hidden
	// state.
	Router Tensor
	// Experts are the layer's experts, each a gated FFN of its own. Each
	// is a separate set of tensors so that an expert, not the layer, can
	// be the unit a tier holds; a GGUF's merged ffn_*_exps tensors are
	// cut into views of them. A layer whose experts a model's
	// ExpertSource serves has none.
	Experts []Expert
}

// Expert is one expert's feed-forward weights: Gate and Up have ExpertFFN
// rows of Dim columns, Down has Dim rows of ExpertFFN columns.
type Expert struct {
	Gate, Up, Down Tensor
}

// Bytes is the expert's weight bytes: what computing it reads.
func (x *Expert) Bytes() int64 { return int64(len(x.Gate.Data) + len(x.Up.Data) + len(x.Down.Data)) }

// rows returns rows [lo, hi) of t as a tensor of its own: a view of the
// same bytes (rows are whole encoded rows, so any row range is valid).
func (t *Tensor) rows(name string, lo, hi int) Tensor {
	rb := t.rowBytes()
	return Tensor{Name: name, Type: t.Type, Rows: hi - lo, Cols: t.Cols, Data: t.Data[lo*rb : hi*rb : hi*rb]}
}

// SplitFused returns l with Q, K, V, Gate and Up set to views of its fused
// QKV and GateUp (Config.Fused), which must have been checked against c;
// other architectures' layers come back unchanged. l itself is not
// modified, so resident weights keep one copy of each matrix.
func (c *Config) SplitFused(l *Layer) Layer {
	out := *l
	if !c.Fused() {
		return out
	}
	q, kv, f := c.QDim(), c.KVDim(), c.FFN
	if l.QKV.Data != nil {
		out.Q = l.QKV.rows(l.QKV.Name+"[q]", 0, q)
		out.K = l.QKV.rows(l.QKV.Name+"[k]", q, q+kv)
		out.V = l.QKV.rows(l.QKV.Name+"[v]", q+kv, q+2*kv)
	}
	if l.GateUp.Data != nil {
		out.Gate = l.GateUp.rows(l.GateUp.Name+"[gate]", 0, f)
		out.Up = l.GateUp.rows(l.GateUp.Name+"[up]", f, 2*f)
	}
	return out
}

// Weights holds every tensor of a model. For tied models Output is the same
// tensor as Embed.
type Weights struct {
	Embed, OutputNorm, Output Tensor
	Layers                    []Layer
}

// LayerSource hands the forward pass one layer's weights at a time. The
// resident implementation returns the loaded weights; a streaming tier can
// fetch a layer's bytes from elsewhere (disk, another device) and recycle
// its buffers in Release. Forward calls Layer(i) and Release(i) in strict
// alternation for i = 0..Layers-1 within one pass, and never uses a Layer
// after releasing it.
type LayerSource interface {
	// Layer returns layer i's weights, valid until Release(i).
	Layer(i int) (*Layer, error)
	// Release tells the source the forward pass is done with layer i.
	Release(i int)
}

// residentSource serves layers straight from Weights.
type residentSource struct{ w *Weights }

func (r residentSource) Layer(i int) (*Layer, error) {
	if i < 0 || i >= len(r.w.Layers) {
		return nil, fmt.Errorf("layer %d out of range [0, %d)", i, len(r.w.Layers))
	}
	return &r.w.Layers[i], nil
}

func (residentSource) Release(int) {}

// tensorCheck is one expected tensor: where it lives, its name suffix, its
// shape and whether it must be F32.
type tensorCheck struct {
	t          *Tensor
	name       string
	rows, cols int
	norm       bool
	// expert, when not -1, is the expert whose slice of the merged tensor
	// name is checked: the name then gets its index, formatted only when
	// it is needed (an error, or a tensor without a name), since a MoE
	// pass checks every layer's picked experts.
	expert int
}

// fullName is the check's tensor name under prefix.
func (ch *tensorCheck) fullName(prefix string) string {
	if ch.expert >= 0 {
		return expertName(prefix+ch.name, ch.expert)
	}
	return prefix + ch.name
}

// LayerRole is one tensor of a layer: its GGUF name after "blk.N.", its
// shape, whether it is an F32 vector (a norm or a bias) and where it lives
// in a Layer.
type LayerRole struct {
	Suffix     string
	Rows, Cols int
	Vector     bool
	Field      func(*Layer) *Tensor
	// FFN marks the feed-forward block's tensors (the FFN norm, gate, up,
	// down and Gemma's post-FFN norm).
	FFN bool
}

// LayerRoles lists the tensors of one layer of c's architecture in the
// order the forward pass reads them. It is the one list of what a layer
// holds: the loader, the checks and the packers of other backends and
// storage formats all follow it.
func (c *Config) LayerRoles() []LayerRole {
	d, q, kv, f, hd := c.Dim, c.QDim(), c.KVDim(), c.FFN, c.HeadDim
	mat := func(s string, rows, cols int, fn func(*Layer) *Tensor) LayerRole {
		return LayerRole{Suffix: s, Rows: rows, Cols: cols, Field: fn}
	}
	vec := func(s string, n int, fn func(*Layer) *Tensor) LayerRole {
		return LayerRole{Suffix: s, Rows: 1, Cols: n, Vector: true, Field: fn}
	}
	rs := []LayerRole{vec("attn_norm.weight", d, func(l *Layer) *Tensor { return &l.AttnNorm })}
	if c.Fused() {
		rs = append(rs, mat("attn_qkv.weight", q+2*kv, d, func(l *Layer) *Tensor { return &l.QKV }))
	} else {
		rs = append(rs,
			mat("attn_q.weight", q, d, func(l *Layer) *Tensor { return &l.Q }),
			mat("attn_k.weight", kv, d, func(l *Layer) *Tensor { return &l.K }),
			mat("attn_v.weight", kv, d, func(l *Layer) *Tensor { return &l.V }))
	}
	if c.QKVBias() {
		rs = append(rs,
			vec("attn_q.bias", q, func(l *Layer) *Tensor { return &l.QBias }),
			vec("attn_k.bias", kv, func(l *Layer) *Tensor { return &l.KBias }),
			vec("attn_v.bias", kv, func(l *Layer) *Tensor { return &l.VBias }))
	}
	if c.QKNorm() {
		rs = append(rs,
			vec("attn_q_norm.weight", hd, func(l *Layer) *Tensor { return &l.QNorm }),
			vec("attn_k_norm.weight", hd, func(l *Layer) *Tensor { return &l.KNorm }))
	}
	rs = append(rs, mat("attn_output.weight", d, q, func(l *Layer) *Tensor { return &l.O }))
	if c.PostNorms() {
		rs = append(rs, vec("post_attention_norm.weight", d, func(l *Layer) *Tensor { return &l.PostAttnNorm }))
	}
	ffn := []LayerRole{vec("ffn_norm.weight", d, func(l *Layer) *Tensor { return &l.FFNNorm })}
	if c.MoE() {
		// The experts are not roles: each is its own set of tensors
		// (Layer.Experts, checked by expertChecks).
		ffn = append(ffn, mat("ffn_gate_inp.weight", c.Experts, d, func(l *Layer) *Tensor { return &l.Router }))
	} else if c.Fused() {
		ffn = append(ffn, mat("ffn_up.weight", 2*f, d, func(l *Layer) *Tensor { return &l.GateUp }))
	} else {
		ffn = append(ffn,
			mat("ffn_gate.weight", f, d, func(l *Layer) *Tensor { return &l.Gate }),
			mat("ffn_up.weight", f, d, func(l *Layer) *Tensor { return &l.Up }))
	}
	if !c.MoE() {
		ffn = append(ffn, mat("ffn_down.weight", d, f, func(l *Layer) *Tensor { return &l.Down }))
	}
	if c.PostNorms() {
		ffn = append(ffn, vec("post_ffw_norm.weight", d, func(l *Layer) *Tensor { return &l.PostFFNNorm }))
	}
	for i := range ffn {
		ffn[i].FFN = true
	}
	return append(rs, ffn...)
}

// roleChecks turns roles into checks of layer l's tensors.
func roleChecks(l *Layer, roles []LayerRole) []tensorCheck {
	out := make([]tensorCheck, 0, len(roles))
	for _, r := range roles {
		out = append(out, tensorCheck{r.Field(l), r.Suffix, r.Rows, r.Cols, r.Vector, -1})
	}
	return out
}

// checkLayer validates layer i's tensors against c.
func (c *Config) checkLayer(i int, l *Layer) error {
	if l == nil {
		return fmt.Errorf("layer %d: nil", i)
	}
	if err := c.checkExpertCount(i, l); err != nil {
		return err
	}
	return runChecks(i, append(roleChecks(l, c.LayerRoles()), expertChecks(c, l)...))
}

// checkFFN validates layer i's feed-forward tensors against c, a MoE
// layer's experts excepted: FFN and FFNRouted check the experts a call
// picks (pickedExperts), where checking all of a layer's experts on every
// call (384 tensors for Qwen3-30B-A3B) would cost more than computing the
// few picks a GPU leaves the CPU.
func (c *Config) checkFFN(i int, l *Layer) error {
	if l == nil {
		return fmt.Errorf("layer %d: nil", i)
	}
	var ffn []LayerRole
	for _, r := range c.LayerRoles() {
		if !r.FFN {
			continue
		}
		if c.Fused() && l.GateUp.Data == nil && r.Field(l) == &l.GateUp {
			// A layer whose gate and up come already split (engine/gpu's
			// host copy of a Phi-3 layer, for the CPU's FFN share): each
			// checked as a matrix of its own.
			ffn = append(ffn,
				LayerRole{Suffix: "ffn_up.weight[gate]", Rows: c.FFN, Cols: c.Dim, Field: func(l *Layer) *Tensor { return &l.Gate }, FFN: true},
				LayerRole{Suffix: "ffn_up.weight[up]", Rows: c.FFN, Cols: c.Dim, Field: func(l *Layer) *Tensor { return &l.Up }, FFN: true})
			continue
		}
		ffn = append(ffn, r)
	}
	if err := c.checkExpertCount(i, l); err != nil {
		return err
	}
	return runChecks(i, roleChecks(l, ffn))
}

// runChecks checks layer i's tensors in order; the first mismatch is the
// error.
func runChecks(i int, checks []tensorCheck) error {
	// The prefix is formatted only where a name needs it: a MoE pass runs
	// these checks on every layer's picked experts.
	prefix := func() string { return fmt.Sprintf("blk.%d.", i) }
	for _, ch := range checks {
		if ch.t.Name == "" {
			ch.t.Name = ch.fullName(prefix())
		}
		if err := ch.t.checkShape(ch.rows, ch.cols, ch.norm); err != nil {
			return fmt.Errorf("tensor %s: %w", ch.fullName(prefix()), err)
		}
	}
	return nil
}

// check validates all weights against c.
func (c *Config) check(w *Weights) error {
	if w == nil {
		return fmt.Errorf("nil weights")
	}
	if err := w.Embed.check("token_embd.weight", c.Vocab, c.Dim, false); err != nil {
		return err
	}
	if err := w.OutputNorm.check("output_norm.weight", 1, c.Dim, true); err != nil {
		return err
	}
	if c.TiedOutput {
		if w.Output.Data == nil {
			w.Output = w.Embed
		}
	}
	if err := w.Output.check("output.weight", c.Vocab, c.Dim, false); err != nil {
		return err
	}
	if len(w.Layers) != c.Layers {
		return fmt.Errorf("weights have %d layers, config says %d", len(w.Layers), c.Layers)
	}
	for i := range w.Layers {
		if err := c.checkLayer(i, &w.Layers[i]); err != nil {
			return err
		}
	}
	return nil
}

// decodeF32 copies an F32 tensor's little-endian bytes into dst.
func decodeF32(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// F32Tensor encodes a row-major float32 matrix as an F32 Tensor. It is a
// convenience for tests and tools that build models in memory.
func F32Tensor(name string, rows, cols int, vals []float32) Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, Type: quant.F32, Rows: rows, Cols: cols, Data: b}
}
