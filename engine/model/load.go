package model

import (
	"fmt"
	"math"

	"github.com/strata-llm/strata/engine/gguf"
)

// LoadGGUF builds a Model over a memory-mapped GGUF file. Every tensor the
// architecture needs is checked for presence, type and shape; layer weights
// stay zero-copy views into the mapping, so the caller must keep m open for
// as long as the Model is used.
func LoadGGUF(m *gguf.Mapped) (*Model, error) {
	if m == nil || m.File == nil {
		return nil, fmt.Errorf("load gguf: nil mapping")
	}
	cfg, err := ConfigFromGGUF(m.File)
	if err != nil {
		return nil, fmt.Errorf("load gguf: %w", err)
	}
	get := func(name string, rows, cols int, vector bool) (Tensor, error) {
		ti, ok := m.Tensor(name)
		if !ok {
			return Tensor{}, fmt.Errorf("load gguf: missing tensor %s", name)
		}
		want := []uint64{uint64(cols), uint64(rows)}
		if vector {
			want = want[:1]
		}
		if !dimsMatch(ti.Dims, want) {
			return Tensor{}, fmt.Errorf("load gguf: tensor %s has dims %v, want %v", name, ti.Dims, want)
		}
		t := Tensor{Name: name, Type: ti.Type, Rows: rows, Cols: cols, Data: m.Data(ti)}
		if err := t.check(name, rows, cols, vector); err != nil {
			return Tensor{}, fmt.Errorf("load gguf: %w", err)
		}
		return t, nil
	}
	w := &Weights{Layers: make([]Layer, cfg.Layers)}
	if w.Embed, err = get("token_embd.weight", cfg.Vocab, cfg.Dim, false); err != nil {
		return nil, err
	}
	if w.OutputNorm, err = get("output_norm.weight", 1, cfg.Dim, true); err != nil {
		return nil, err
	}
	if cfg.TiedOutput {
		w.Output = w.Embed
	} else if w.Output, err = get("output.weight", cfg.Vocab, cfg.Dim, false); err != nil {
		return nil, err
	}
	if cfg.Arch == ArchLlama {
		if _, ok := m.Tensor("rope_freqs.weight"); ok {
			rf, err := get("rope_freqs.weight", 1, cfg.HeadDim/2, true)
			if err != nil {
				return nil, err
			}
			freqs := make([]float32, cfg.HeadDim/2)
			decodeF32(freqs, rf.Data)
			for i := range freqs {
				if cfg.RopeFreqs != nil { // linear scaling on top
					freqs[i] *= cfg.RopeFreqs[i]
				}
			}
			cfg.RopeFreqs = freqs
		}
	}
	if cfg.Arch == ArchPhi3 {
		if err := phi3RopeFactors(m, &cfg, get); err != nil {
			return nil, err
		}
	}
	roles := cfg.LayerRoles()
	for i := range w.Layers {
		l := &w.Layers[i]
		for _, r := range roles {
			if *r.Field(l), err = get(fmt.Sprintf("blk.%d.%s", i, r.Suffix), r.Rows, r.Cols, r.Vector); err != nil {
				return nil, err
			}
		}
		if cfg.MoE() {
			if err := loadExperts(m, &cfg, i, l); err != nil {
				return nil, fmt.Errorf("load gguf: %w", err)
			}
		}
	}
	mod, err := New(cfg, w)
	if err != nil {
		return nil, fmt.Errorf("load gguf: %w", err)
	}
	return mod, nil
}

// phi3RopeFactors reads LongRoPE's per-pair frequency divisors into
// cfg.RopeFreqs: rope_factors_long.weight when the trained context
// exceeds phi3.rope.scaling.original_context_length, as llama.cpp picks
// them for a context of the trained length and transformers for
// positions past the original one; rope_factors_short.weight otherwise.
// A file without them rotates unscaled (Phi-3 4k and Phi-4).
func phi3RopeFactors(m *gguf.Mapped, cfg *Config, get func(name string, rows, cols int, vector bool) (Tensor, error)) error {
	orig := uint64(cfg.Context)
	if v, ok := m.Uint("phi3.rope.scaling.original_context_length"); ok {
		if v == 0 {
			return fmt.Errorf("load gguf: phi3.rope.scaling.original_context_length is 0")
		}
		orig = v
	}
	name := "rope_factors_short.weight"
	if uint64(cfg.Context) > orig {
		name = "rope_factors_long.weight"
	}
	if _, ok := m.Tensor(name); !ok {
		_, long := m.Tensor("rope_factors_long.weight")
		_, short := m.Tensor("rope_factors_short.weight")
		if long || short {
			return fmt.Errorf("load gguf: missing tensor %s (the file has only one of the LongRoPE factor tensors)", name)
		}
		return nil
	}
	t, err := get(name, 1, cfg.HeadDim/2, true)
	if err != nil {
		return err
	}
	f := make([]float32, cfg.HeadDim/2)
	decodeF32(f, t.Data)
	for i := range f {
		if !(f[i] > 0) || math.IsInf(float64(f[i]), 0) {
			return fmt.Errorf("load gguf: %s[%d] = %v must be positive and finite", name, i, f[i])
		}
		if cfg.RopeFreqs != nil { // linear scaling on top
			f[i] *= cfg.RopeFreqs[i]
		}
	}
	cfg.RopeFreqs = f
	return nil
}

// Open maps a GGUF file and loads it. The returned Model owns the mapping:
// Close releases it.
func Open(path string) (*Model, error) {
	mp, err := gguf.Map(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	m, err := LoadGGUF(mp)
	if err != nil {
		mp.Close()
		return nil, fmt.Errorf("open model %s: %w", path, err)
	}
	m.closer = mp.Close
	return m, nil
}

// dimsMatch compares GGUF dims with the expected ones, ignoring trailing
// dimensions of size 1 (GGUF writers differ on whether vectors carry them).
func dimsMatch(got, want []uint64) bool {
	trim := func(d []uint64) []uint64 {
		for len(d) > 1 && d[len(d)-1] == 1 {
			d = d[:len(d)-1]
		}
		return d
	}
	g, w := trim(got), trim(want)
	if len(g) != len(w) {
		return false
	}
	for i := range g {
		if g[i] != w[i] {
			return false
		}
	}
	return true
}
