package prefab

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// Pool file layout (all integers little-endian):
//
//	offset 0   [12]byte  magic "STRATPOOL" + three zero bytes
//	offset 12  uint32    format version (Version)
//	offset 16  uint64    manifest offset (always HeaderSize)
//	offset 24  uint64    manifest length in bytes
//	offset 32  uint64    xxh3-64 of the manifest bytes
//	offset 40  uint64    xxh3-64 of header bytes [0, 40)
//	offset 48  [16]byte  zero
//	offset 64  manifest  JSON (see manifest)
//	then, each at a multiple of ExtentAlign: the globals extent, then one
//	extent per layer in layer order; the file ends at the last extent's end.
//
// An extent's length is a multiple of ExtentAlign; the bytes between its
// last tensor and its end are zero, and its checksum covers the full padded
// length, so a reader can verify exactly what one aligned read returned.
// Inside an extent, tensors start at multiples of TensorAlign in the order
// the forward pass consumes them (layerOrder).
const (
	// Magic opens every pool file; engine.Open tells pools from GGUF by it.
	Magic = "STRATPOOL"
	// Version is the pool format version this package reads and writes.
	Version = 1
	// HeaderSize is the size of the fixed header before the manifest.
	HeaderSize = 64
	// ExtentAlign is the alignment of every extent's offset and length:
	// the O_DIRECT and NVMe-LBA granule, so one extent is one aligned read.
	ExtentAlign = tier.PageSize
	// TensorAlign is the alignment of tensors inside an extent, so kernels
	// (and later DMA into device slots) see cache-line aligned rows.
	TensorAlign = 64
)

// formatName marks the manifest so a stray JSON file is not mistaken for one.
const formatName = "strata-pool"

// maxManifest bounds the manifest a reader accepts (a 256k-token vocabulary
// with merges is a few tens of MB of JSON).
const maxManifest = 1 << 30

// ErrCorrupt is wrapped by every error about a pool whose bytes are not what
// its header and manifest promise (bad magic, checksum mismatch, truncation,
// inconsistent layout). Test for it with errors.Is.
var ErrCorrupt = errors.New("corrupt pool")

// manifest is the JSON document after the header.
type manifest struct {
	Format string         `json:"format"`
	Arch   string         `json:"architecture"`
	Type   string         `json:"prefab_type"`
	Source string         `json:"source,omitempty"`
	Config manifestConfig `json:"config"`
	Vocab  manifestVocab  `json:"tokenizer"`
	// Globals holds the non-layer tensors: token_embd, output_norm and
	// (untied models) output.
	Globals extentDesc   `json:"globals"`
	Layers  []extentDesc `json:"layers"`
}

// manifestConfig mirrors model.Config with stable JSON names, so renaming a
// Go field cannot silently change the format.
type manifestConfig struct {
	Vocab     int       `json:"vocab"`
	Dim       int       `json:"dim"`
	FFN       int       `json:"ffn"`
	Layers    int       `json:"layers"`
	Heads     int       `json:"heads"`
	KVHeads   int       `json:"kv_heads"`
	HeadDim   int       `json:"head_dim"`
	Context   int       `json:"context"`
	RopeTheta float64   `json:"rope_theta"`
	RopeFreqs []float32 `json:"rope_freqs,omitempty"`
	// RopeThetaLocal is Gemma 3's local layers' base; absent (0) in
	// pools of other architectures, older ones included.
	RopeThetaLocal float64 `json:"rope_theta_local,omitempty"`
	// RopeAttnFactor is Phi-3's LongRoPE attention factor; absent (0)
	// elsewhere.
	RopeAttnFactor float32 `json:"rope_attn_factor,omitempty"`
	NormEps        float32 `json:"norm_eps"`
	AttnScale      float32 `json:"attn_scale"`
	AttnSoftcap    float32 `json:"attn_softcap"`
	FinalSoftcap   float32 `json:"final_softcap"`
	SlidingWindow  int     `json:"sliding_window"`
	EmbedScale     float32 `json:"embed_scale"`
	TiedOutput     bool    `json:"tied_output"`
	Experts        int     `json:"experts,omitempty"`
	ExpertsUsed    int     `json:"experts_used,omitempty"`
	ExpertFFN      int     `json:"expert_ffn,omitempty"`
}

func configToManifest(c model.Config) manifestConfig {
	return manifestConfig{
		Vocab: c.Vocab, Dim: c.Dim, FFN: c.FFN, Layers: c.Layers, Heads: c.Heads,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, Context: c.Context, RopeTheta: c.RopeTheta,
		RopeFreqs: c.RopeFreqs, RopeThetaLocal: c.RopeThetaLocal, RopeAttnFactor: c.RopeAttnFactor, NormEps: c.NormEps, AttnScale: c.AttnScale,
		AttnSoftcap: c.AttnSoftcap, FinalSoftcap: c.FinalSoftcap,
		SlidingWindow: c.SlidingWindow, EmbedScale: c.EmbedScale, TiedOutput: c.TiedOutput,
		Experts: c.Experts, ExpertsUsed: c.ExpertsUsed, ExpertFFN: c.ExpertFFN,
	}
}

func (m manifestConfig) config(arch string) model.Config {
	return model.Config{
		Arch: arch, Vocab: m.Vocab, Dim: m.Dim, FFN: m.FFN, Layers: m.Layers, Heads: m.Heads,
		KVHeads: m.KVHeads, HeadDim: m.HeadDim, Context: m.Context, RopeTheta: m.RopeTheta,
		RopeFreqs: m.RopeFreqs, RopeThetaLocal: m.RopeThetaLocal, RopeAttnFactor: m.RopeAttnFactor, NormEps: m.NormEps, AttnScale: m.AttnScale,
		AttnSoftcap: m.AttnSoftcap, FinalSoftcap: m.FinalSoftcap,
		SlidingWindow: m.SlidingWindow, EmbedScale: m.EmbedScale, TiedOutput: m.TiedOutput,
		Experts: m.Experts, ExpertsUsed: m.ExpertsUsed, ExpertFFN: m.ExpertFFN,
	}
}

// manifestVocab carries a tokenizer.Vocab losslessly: token texts that are
// not valid UTF-8 (SentencePiece vocabularies may hold raw bytes) travel as
// base64 objects, and scores as raw float32 bits so no value can be lost to
// JSON's number syntax.
type manifestVocab struct {
	Model          string    `json:"model"`
	Pre            string    `json:"pre,omitempty"`
	Tokens         []jstring `json:"tokens"`
	ScoresF32LE    string    `json:"scores_f32le,omitempty"` // base64
	Types          []int32   `json:"types,omitempty"`
	Merges         []jstring `json:"merges,omitempty"`
	BOS            int32     `json:"bos"`
	EOS            int32     `json:"eos"`
	EOT            int32     `json:"eot"`
	PAD            int32     `json:"pad"`
	UNK            int32     `json:"unk"`
	AddBOS         bool      `json:"add_bos"`
	AddEOS         bool      `json:"add_eos"`
	AddSpacePrefix bool      `json:"add_space_prefix"`
	ChatTemplate   jstring   `json:"chat_template,omitempty"`
}

func vocabToManifest(v *tokenizer.Vocab) manifestVocab {
	mv := manifestVocab{
		Model: v.Model, Pre: v.Pre, Types: v.Types,
		BOS: v.BOS, EOS: v.EOS, EOT: v.EOT, PAD: v.PAD, UNK: v.UNK,
		AddBOS: v.AddBOS, AddEOS: v.AddEOS, AddSpacePrefix: v.AddSpacePrefix,
		ChatTemplate: jstring(v.ChatTemplate),
	}
	mv.Tokens = make([]jstring, len(v.Tokens))
	for i, t := range v.Tokens {
		mv.Tokens[i] = jstring(t)
	}
	if v.Merges != nil {
		mv.Merges = make([]jstring, len(v.Merges))
		for i, t := range v.Merges {
			mv.Merges[i] = jstring(t)
		}
	}
	if v.Scores != nil {
		b := make([]byte, 4*len(v.Scores))
		for i, s := range v.Scores {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(s))
		}
		mv.ScoresF32LE = base64.StdEncoding.EncodeToString(b)
	}
	return mv
}

func (mv *manifestVocab) vocab() (*tokenizer.Vocab, error) {
	v := &tokenizer.Vocab{
		Model: mv.Model, Pre: mv.Pre, Types: mv.Types,
		BOS: mv.BOS, EOS: mv.EOS, EOT: mv.EOT, PAD: mv.PAD, UNK: mv.UNK,
		AddBOS: mv.AddBOS, AddEOS: mv.AddEOS, AddSpacePrefix: mv.AddSpacePrefix,
		ChatTemplate: string(mv.ChatTemplate),
	}
	v.Tokens = make([]string, len(mv.Tokens))
	for i, t := range mv.Tokens {
		v.Tokens[i] = string(t)
	}
	if mv.Merges != nil {
		v.Merges = make([]string, len(mv.Merges))
		for i, t := range mv.Merges {
			v.Merges[i] = string(t)
		}
	}
	if mv.ScoresF32LE != "" {
		b, err := base64.StdEncoding.DecodeString(mv.ScoresF32LE)
		if err != nil {
			return nil, fmt.Errorf("tokenizer scores: %w", err)
		}
		if len(b) != 4*len(v.Tokens) {
			return nil, fmt.Errorf("tokenizer scores: %d bytes for %d tokens", len(b), len(v.Tokens))
		}
		v.Scores = make([]float32, len(v.Tokens))
		for i := range v.Scores {
			v.Scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	if v.Types != nil && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), len(v.Tokens))
	}
	for _, id := range []int32{v.BOS, v.EOS, v.EOT, v.PAD, v.UNK} {
		if id < -1 || int(id) >= len(v.Tokens) {
			return nil, fmt.Errorf("tokenizer: special token id %d outside [-1, %d)", id, len(v.Tokens))
		}
	}
	return v, nil
}

// jstring is a string that survives JSON byte for byte: valid UTF-8 is a
// plain JSON string, anything else an object {"b64": "..."}.
type jstring string

func (s jstring) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(struct {
		B64 string `json:"b64"`
	}{base64.StdEncoding.EncodeToString([]byte(s))})
}

func (s *jstring) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			B64 string `json:"b64"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(o.B64)
		if err != nil {
			return err
		}
		*s = jstring(raw)
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = jstring(v)
	return nil
}

// extentDesc describes one extent in the manifest.
type extentDesc struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// XXH3 is the xxh3-64 of the extent's Length bytes, as 16 hex digits
	// (fixed width, so the manifest's size does not depend on the values).
	XXH3    string       `json:"xxh3"`
	Tensors []tensorDesc `json:"tensors"`
	// Experts are a MoE layer's experts, each its own extent (right
	// after the layer's, in expert order) holding its gate, up and down,
	// so an expert can be placed, read and verified on its own.
	Experts []extentDesc `json:"experts,omitempty"`
}

// tensorDesc describes one tensor inside an extent.
type tensorDesc struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	Dims   []uint64 `json:"dims"`   // ggml order: dims[0] is the row length
	Offset int64    `json:"offset"` // from the start of the extent
	Bytes  int64    `json:"bytes"`
}

func hexSum(s uint64) string { return fmt.Sprintf("%016x", s) }

// role names one tensor slot of a layer in kernel order.
type role struct {
	suffix     string // name after "blk.N."
	norm       bool
	rows, cols int // the shape the config gives it
	field      func(l *model.Layer) *model.Tensor
	// merged is, for an expert's tensor, the GGUF tensor (suffix) that
	// holds it as one slab of all the experts'.
	merged string
}

// layerOrder returns the tensors of one layer extent of cfg's model in the
// order the forward pass consumes them: model.Config.LayerRoles, the
// engine's one list of what a layer holds (a MoE layer's ends with its
// router; its experts are extents of their own, see expertOrder).
func layerOrder(cfg *model.Config) []role {
	var rs []role
	for _, r := range cfg.LayerRoles() {
		rs = append(rs, role{r.Suffix, r.Vector, r.Rows, r.Cols, r.Field, ""})
	}
	return rs
}

// expertOrder returns the tensors of expert e's extent in a MoE layer: its
// gate, up and down, named as llama.cpp's older per-expert tensors were
// (ffn_gate.E.weight); merged names the GGUF tensor holding all experts'.
func expertOrder(cfg *model.Config, e int) []role {
	d, ef, n := cfg.Dim, cfg.ExpertFFN, strconv.Itoa(e)
	return []role{
		{"ffn_gate." + n + ".weight", false, ef, d, func(l *model.Layer) *model.Tensor { return &l.Experts[e].Gate }, "ffn_gate_exps.weight"},
		{"ffn_up." + n + ".weight", false, ef, d, func(l *model.Layer) *model.Tensor { return &l.Experts[e].Up }, "ffn_up_exps.weight"},
		{"ffn_down." + n + ".weight", false, d, ef, func(l *model.Layer) *model.Tensor { return &l.Experts[e].Down }, "ffn_down_exps.weight"},
	}
}

// globalNames lists the globals extent's tensors in order.
func globalNames(tied bool) []string {
	if tied {
		return []string{"token_embd.weight", "output_norm.weight"}
	}
	return []string{"token_embd.weight", "output_norm.weight", "output.weight"}
}

// tensorInfo is a validated tensorDesc.
type tensorInfo struct {
	name       string
	typ        quant.Type
	rows, cols int
	off, size  int64
}

// extentInfo is a validated extentDesc.
type extentInfo struct {
	name    string // "layer 3" or "globals", used in errors
	ext     tier.Extent
	sum     uint64
	used    int64 // end of the last tensor
	tensors []tensorInfo
}

// layout is a parsed and validated pool: everything OpenPool needs besides
// the bytes.
type layout struct {
	man     *manifest
	cfg     model.Config
	vocab   *tokenizer.Vocab
	globals extentInfo
	layers  []extentInfo
	experts [][]extentInfo // per MoE layer, its experts' extents
	end     int64          // end of the last extent: the minimum file size
}

// extents lists the globals extent then every layer extent (each followed
// by its experts'), in file order.
func (l *layout) extents() []*extentInfo {
	es := []*extentInfo{&l.globals}
	for i := range l.layers {
		es = append(es, &l.layers[i])
		for e := range l.experts[i] {
			es = append(es, &l.experts[i][e])
		}
	}
	return es
}

// encodeHeader builds the fixed header for a manifest.
func encodeHeader(man []byte) []byte {
	h := make([]byte, HeaderSize)
	copy(h, Magic)
	binary.LittleEndian.PutUint32(h[12:], Version)
	binary.LittleEndian.PutUint64(h[16:], HeaderSize)
	binary.LittleEndian.PutUint64(h[24:], uint64(len(man)))
	binary.LittleEndian.PutUint64(h[32:], xxh3.Hash(man))
	binary.LittleEndian.PutUint64(h[40:], xxh3.Hash(h[:40]))
	return h
}

// IsPoolHeader reports whether b starts with the pool magic.
func IsPoolHeader(b []byte) bool {
	return len(b) >= len(Magic) && string(b[:len(Magic)]) == Magic
}

// parseLayout validates a whole pool image (the mapped file): header,
// manifest checksum, manifest contents against the architecture, and that
// the image is long enough for every extent. Extent checksums are not
// checked here; they are verified lazily on first use.
func parseLayout(data []byte) (*layout, error) {
	if len(data) < HeaderSize {
		if !IsPoolHeader(data) && !bytes.HasPrefix([]byte(Magic), data) {
			return nil, fmt.Errorf("%w: bad magic (not a strata pool)", ErrCorrupt)
		}
		return nil, fmt.Errorf("%w: truncated header: %d bytes, want %d", ErrCorrupt, len(data), HeaderSize)
	}
	if !IsPoolHeader(data) || data[9] != 0 || data[10] != 0 || data[11] != 0 {
		return nil, fmt.Errorf("%w: bad magic %q (not a strata pool)", ErrCorrupt, data[:12])
	}
	if got, want := binary.LittleEndian.Uint64(data[40:]), xxh3.Hash(data[:40]); got != want {
		return nil, fmt.Errorf("%w: header checksum %016x, computed %016x", ErrCorrupt, got, want)
	}
	if v := binary.LittleEndian.Uint32(data[12:]); v != Version {
		return nil, fmt.Errorf("%w: unsupported pool version %d (this build reads version %d)", ErrCorrupt, v, Version)
	}
	moff := binary.LittleEndian.Uint64(data[16:])
	mlen := binary.LittleEndian.Uint64(data[24:])
	msum := binary.LittleEndian.Uint64(data[32:])
	if moff != HeaderSize {
		return nil, fmt.Errorf("%w: manifest offset %d, want %d", ErrCorrupt, moff, HeaderSize)
	}
	if mlen == 0 || mlen > maxManifest {
		return nil, fmt.Errorf("%w: manifest length %d out of range", ErrCorrupt, mlen)
	}
	if moff+mlen > uint64(len(data)) {
		return nil, fmt.Errorf("%w: truncated manifest: needs bytes [%d, %d), file has %d", ErrCorrupt, moff, moff+mlen, len(data))
	}
	mb := data[moff : moff+mlen]
	if got := xxh3.Hash(mb); got != msum {
		return nil, fmt.Errorf("%w: manifest checksum %016x, header says %016x", ErrCorrupt, got, msum)
	}
	l, err := parseManifest(mb, int64(moff+mlen))
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if l.end > int64(len(data)) {
		for _, e := range l.extents() {
			if end := e.ext.Offset + e.ext.Length; end > int64(len(data)) {
				return nil, fmt.Errorf("%w: truncated: extent %s needs bytes [%d, %d) but the file has %d bytes",
					ErrCorrupt, e.name, e.ext.Offset, end, len(data))
			}
		}
	}
	return l, nil
}

// parseManifest decodes and validates the manifest JSON; manEnd is where
// the manifest ends in the file (extents must start after it).
func parseManifest(b []byte, manEnd int64) (*layout, error) {
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON document")
	}
	if m.Format != formatName {
		return nil, fmt.Errorf("format %q, want %q", m.Format, formatName)
	}
	cfg := m.Config.config(m.Arch)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(cfg.RopeFreqs) == 0 {
		cfg.RopeFreqs = nil
	}
	v, err := m.Vocab.vocab()
	if err != nil {
		return nil, err
	}
	if len(v.Tokens) != cfg.Vocab {
		return nil, fmt.Errorf("tokenizer has %d tokens but the config's vocabulary is %d", len(v.Tokens), cfg.Vocab)
	}
	l := &layout{man: &m, cfg: cfg, vocab: v}
	if len(m.Layers) != cfg.Layers {
		return nil, fmt.Errorf("%d layer extents, config has %d layers", len(m.Layers), cfg.Layers)
	}
	prevEnd := manEnd
	// Globals.
	names := globalNames(cfg.TiedOutput)
	specs := make([]tensorSpec, len(names))
	for i, n := range names {
		specs[i] = tensorSpec{name: n, rows: cfg.Vocab, cols: cfg.Dim}
		if n == "output_norm.weight" {
			specs[i] = tensorSpec{name: n, rows: 1, cols: cfg.Dim, norm: true}
		}
	}
	if l.globals, err = checkExtent("globals", &m.Globals, specs, prevEnd); err != nil {
		return nil, err
	}
	prevEnd = l.globals.ext.Offset + l.globals.ext.Length
	specsOf := func(i int, order []role) []tensorSpec {
		specs := make([]tensorSpec, len(order))
		for j, r := range order {
			specs[j] = tensorSpec{name: "blk." + strconv.Itoa(i) + "." + r.suffix, rows: r.rows, cols: r.cols, norm: r.norm}
		}
		return specs
	}
	order := layerOrder(&cfg)
	l.layers = make([]extentInfo, len(m.Layers))
	l.experts = make([][]extentInfo, len(m.Layers))
	for i := range m.Layers {
		name := "layer " + strconv.Itoa(i)
		if l.layers[i], err = checkExtent(name, &m.Layers[i], specsOf(i, order), prevEnd); err != nil {
			return nil, err
		}
		prevEnd = l.layers[i].ext.Offset + l.layers[i].ext.Length
		if len(m.Layers[i].Experts) != cfg.Experts {
			return nil, fmt.Errorf("extent %s: %d expert extents, config has %d experts", name, len(m.Layers[i].Experts), cfg.Experts)
		}
		if cfg.MoE() {
			l.experts[i] = make([]extentInfo, cfg.Experts)
		}
		for e := range m.Layers[i].Experts {
			x := &m.Layers[i].Experts[e]
			if len(x.Experts) != 0 {
				return nil, fmt.Errorf("extent %s expert %d: has experts of its own", name, e)
			}
			if l.experts[i][e], err = checkExtent(name+" expert "+strconv.Itoa(e), x, specsOf(i, expertOrder(&cfg, e)), prevEnd); err != nil {
				return nil, err
			}
			prevEnd = l.experts[i][e].ext.Offset + l.experts[i][e].ext.Length
		}
	}
	l.end = prevEnd
	return l, nil
}

// tensorSpec is what one tensor of an extent must be.
type tensorSpec struct {
	name       string
	rows, cols int
	norm       bool
}

// checkExtent validates one extent description: alignment, placement after
// prev, and tensors exactly matching specs (names, order, shapes, sizes,
// alignment, no overlap, inside the extent).
func checkExtent(name string, d *extentDesc, specs []tensorSpec, prev int64) (extentInfo, error) {
	e := extentInfo{name: name, ext: tier.Extent{Offset: d.Offset, Length: d.Length}}
	fail := func(format string, a ...any) (extentInfo, error) {
		return extentInfo{}, fmt.Errorf("extent %s: %s", name, fmt.Sprintf(format, a...))
	}
	if d.Offset < prev || d.Offset%ExtentAlign != 0 {
		return fail("offset %d must be a multiple of %d at or after %d", d.Offset, ExtentAlign, prev)
	}
	if d.Length <= 0 || d.Length%ExtentAlign != 0 || d.Length > math.MaxInt64-d.Offset {
		return fail("length %d must be a positive multiple of %d", d.Length, ExtentAlign)
	}
	if len(d.XXH3) != 16 {
		return fail("checksum %q is not 16 hex digits", d.XXH3)
	}
	sum, err := strconv.ParseUint(d.XXH3, 16, 64)
	if err != nil {
		return fail("checksum %q is not 16 hex digits", d.XXH3)
	}
	e.sum = sum
	if len(d.Tensors) != len(specs) {
		return fail("%d tensors, want %d", len(d.Tensors), len(specs))
	}
	e.tensors = make([]tensorInfo, len(specs))
	var pos int64
	for i, s := range specs {
		td := &d.Tensors[i]
		if td.Name != s.name {
			return fail("tensor %d is %q, want %q (tensors must be in kernel order)", i, td.Name, s.name)
		}
		typ, err := quant.Parse(td.Type)
		if err != nil || !typ.Known() {
			return fail("tensor %s: unknown type %q", s.name, td.Type)
		}
		if s.norm && typ != quant.F32 {
			return fail("tensor %s: type %v, norms must be F32", s.name, typ)
		}
		want := []uint64{uint64(s.cols), uint64(s.rows)}
		if s.norm {
			want = want[:1]
		}
		if len(td.Dims) != len(want) || td.Dims[0] != want[0] || (len(want) > 1 && td.Dims[1] != want[1]) {
			return fail("tensor %s: dims %v, want %v", s.name, td.Dims, want)
		}
		size, err := typ.TensorBytes(want)
		if err != nil {
			return fail("tensor %s: %v", s.name, err)
		}
		if td.Bytes != size {
			return fail("tensor %s: %d bytes, %v %v needs %d", s.name, td.Bytes, typ, want, size)
		}
		if td.Offset < pos || td.Offset%TensorAlign != 0 || td.Offset > d.Length || size > d.Length-td.Offset {
			return fail("tensor %s: offset %d (+%d bytes) must be %d-aligned, after %d and inside the %d-byte extent",
				s.name, td.Offset, size, TensorAlign, pos, d.Length)
		}
		pos = td.Offset + size
		e.tensors[i] = tensorInfo{name: s.name, typ: typ, rows: s.rows, cols: s.cols, off: td.Offset, size: size}
	}
	e.used = pos
	return e, nil
}
