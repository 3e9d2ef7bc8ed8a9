package prefab

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/engine/tokenizer"
	"github.com/strata-llm/strata/internal/hostmem"
)

// nmseBound is the largest per-step logits NMSE a converted pool may show
// against its source model (tiny shapes, f32 source). The formats' own
// weight NMSE on these random weights is 2.8e-5 (Q8_0), 5e-5 (INT8 rows)
// and 4.9e-3 (Q4_K); through the tiny models' layers, norms and softcaps
// the logits show 5x (llama) to 27x (gemma2) that. The bound allows 40x:
// measured maxima are 3.9e-4, 1.5e-3 and 0.12. A misplaced, transposed or
// shifted tensor gives NMSE of order 1. That the converted bytes are exactly
// the serial dequantize-then-quantize of the source is checked separately
// (checkConversion), bit for bit.
var nmseBound = map[string]float64{
	TypeQ8_0: 40 * 2.8e-5,
	TypeINT8: 40 * 5.4e-5,
	TypeQ4_K: 40 * 4.9e-3,
}

// TestPoolRoundTrip writes tiny llama and gemma2 models as pools of every
// prefab type and checks the manifest, the layout rules and the logits.
func TestPoolRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct{ arch, src, typ string }{
		{"llama", "f32", TypeKeep},
		{"llama", "q4_k_m", TypeKeep},
		{"llama", "f32", TypeQ8_0},
		{"llama", "f32", TypeINT8},
		{"llama", "f32", TypeQ4_K},
		{"llama", "q8_0", TypeQ4_K},
		{"gemma2", "f32", TypeKeep},
		{"gemma2", "f32", TypeQ8_0},
		{"gemma2", "f32", TypeINT8},
		{"gemma2", "f32", TypeQ4_K},
		{"mixtral", "f32", TypeKeep},
		{"mixtral", "q4_k_m", TypeKeep},
		{"mixtral", "f32", TypeQ8_0},
		{"qwen3moe", "q4_k_m", TypeKeep},
		{"gemma3", "f32", TypeQ4_K},
		{"mistral", "f32", TypeQ8_0},
		{"phi3", "q4_k_m", TypeKeep},
		{"phi3", "f32", TypeQ8_0},
		{"qwen2", "f32", TypeKeep},
		{"qwen2", "q4_k_m", TypeQ8_0},
		{"qwen3", "f32", TypeKeep},
		{"qwen3", "f32", TypeQ4_K},
	}
	for _, c := range cases {
		t.Run(c.arch+"/"+c.src+"/"+c.typ, func(t *testing.T) {
			t.Parallel()
			path, src := prefab(t, dir, c.arch, c.src, c.typ)
			ref, err := model.LoadGGUF(src)
			if err != nil {
				t.Fatal(err)
			}
			p, err := OpenPool(path)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()

			if got, want := p.Config(), ref.Config; !reflect.DeepEqual(got, want) {
				t.Errorf("config:\n got %+v\nwant %+v", got, want)
			}
			wantVocab, err := tokenizer.VocabFromGGUF(src.File)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Vocab(), wantVocab) {
				t.Errorf("vocab differs after the round trip")
			}
			if _, err := tokenizer.New(p.Vocab()); err != nil {
				t.Errorf("tokenizer from the pool: %v", err)
			}
			checkLayout(t, path, c.arch)

			pm, err := p.Model()
			if err != nil {
				t.Fatal(err)
			}
			got := logitsRun(t, pm, 4)
			want := logitsRun(t, ref, 4)
			for s := range want {
				if c.typ == TypeKeep {
					for i := range want[s] {
						if got[s][i] != want[s][i] {
							t.Fatalf("step %d logit %d: %v, GGUF model %v (keep must be bit-identical)", s, i, got[s][i], want[s][i])
						}
					}
					continue
				}
				e := quant.NMSE(got[s], want[s])
				t.Logf("step %d: logits NMSE %.3g", s, e)
				if e > nmseBound[c.typ] {
					t.Errorf("step %d: logits NMSE %.3g exceeds %.0g", s, e, nmseBound[c.typ])
				}
			}
			checkConversion(t, ref, pm, c.typ)
		})
	}
}

// checkConversion requires every pool tensor to be exactly the serial
// dequantize-then-quantize of the source tensor (or its bytes, when the
// type is kept), so the parallel chunked conversion cannot drift.
func checkConversion(t *testing.T, ref, pm *model.Model, typ string) {
	t.Helper()
	pairs := [][2]model.Tensor{{ref.Weights.Embed, pm.Weights.Embed}, {ref.Weights.Output, pm.Weights.Output}}
	for i := range ref.Weights.Layers {
		for _, r := range layerOrder(&ref.Config) {
			pairs = append(pairs, [2]model.Tensor{*r.field(&ref.Weights.Layers[i]), *r.field(&pm.Weights.Layers[i])})
		}
	}
	for _, pr := range pairs {
		s, d := pr[0], pr[1]
		want := s.Type
		if s.Rows > 1 {
			var err error
			if want, err = matrixType(typ, s.Type, s.Cols); err != nil {
				t.Fatal(err)
			}
		}
		if d.Type != want {
			t.Errorf("%s: type %v, want %v", s.Name, d.Type, want)
			continue
		}
		if want == s.Type {
			if !bytes.Equal(d.Data, s.Data) {
				t.Errorf("%s: bytes differ from the source though the type is kept", s.Name)
			}
			continue
		}
		f := make([]float32, s.Rows*s.Cols)
		if err := quant.DequantizeRows(s.Type, s.Data, s.Cols, f); err != nil {
			t.Fatal(err)
		}
		q := make([]byte, len(d.Data))
		if err := quant.QuantizeRows(want, f, s.Cols, q); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(q, d.Data) {
			t.Errorf("%s: converted bytes differ from a serial %v -> %v conversion", s.Name, s.Type, want)
		}
	}
}

// checkLayout reads the pool file independently of the parser and checks
// the layout rules: header fields, every extent 4 KiB-aligned in file order,
// tensors 64-byte aligned in kernel order, zero padding, checksums.
func checkLayout(t *testing.T, path, arch string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data[:9]) != "STRATPOOL" || binary.LittleEndian.Uint32(data[12:]) != Version {
		t.Fatalf("header starts %q", data[:16])
	}
	mlen := binary.LittleEndian.Uint64(data[24:])
	var man struct {
		Globals extentDesc   `json:"globals"`
		Layers  []extentDesc `json:"layers"`
	}
	if err := json.Unmarshal(data[64:64+mlen], &man); err != nil {
		t.Fatal(err)
	}
	kernel := []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"}
	switch arch {
	case "gemma2":
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"}
	case "qwen2":
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"}
	case "qwen3":
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"}
	case "phi3":
		kernel = []string{"attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down"}
	case "gemma3":
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"}
	case "mixtral":
		// The layer's extent ends with the router; each expert's gate,
		// up and down are an extent of their own, right after it.
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate_inp"}
	case "qwen3moe":
		kernel = []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output", "ffn_norm", "ffn_gate_inp"}
	}
	// Every extent in file order with the names its tensors must have.
	type want struct {
		e     extentDesc
		names []string
	}
	exts := []want{{man.Globals, nil}}
	for li, l := range man.Layers {
		var names []string
		for _, k := range kernel {
			if !strings.Contains(k, ".") {
				k += ".weight"
			}
			names = append(names, "blk."+itoa(li)+"."+k)
		}
		exts = append(exts, want{l, names})
		moe := arch == "mixtral" || arch == "qwen3moe"
		if n := len(l.Experts); moe != (n == 8) || (!moe && n != 0) {
			t.Fatalf("layer %d has %d expert extents", li, n)
		}
		for e, x := range l.Experts {
			var names []string
			for _, k := range []string{"ffn_gate.", "ffn_up.", "ffn_down."} {
				names = append(names, "blk."+itoa(li)+"."+k+itoa(e)+".weight")
			}
			exts = append(exts, want{x, names})
		}
	}
	prev := int64(64 + mlen)
	for i, w := range exts {
		e := w.e
		if e.Offset%4096 != 0 || e.Length%4096 != 0 || e.Offset < prev {
			t.Errorf("extent %d at %d+%d: not 4 KiB aligned or out of order (previous end %d)", i, e.Offset, e.Length, prev)
		}
		prev = e.Offset + e.Length
		b := data[e.Offset : e.Offset+e.Length]
		if hexSum(xxh3.Hash(b)) != e.XXH3 {
			t.Errorf("extent %d: checksum mismatch", i)
		}
		if w.names != nil && len(e.Tensors) != len(w.names) {
			t.Errorf("extent %d: %d tensors, want %d", i, len(e.Tensors), len(w.names))
			continue
		}
		var end int64
		for j, td := range e.Tensors {
			if td.Offset%64 != 0 || td.Offset < end {
				t.Errorf("extent %d tensor %s at %d: not 64-byte aligned or overlapping", i, td.Name, td.Offset)
			}
			if w.names != nil && td.Name != w.names[j] {
				t.Errorf("extent %d tensor %d is %s, want %s (kernel order)", i, j, td.Name, w.names[j])
			}
			if (strings.HasSuffix(td.Name, "norm.weight") || strings.HasSuffix(td.Name, ".bias")) && td.Type != "F32" {
				t.Errorf("%s stored as %s, norms must stay F32", td.Name, td.Type)
			}
			end = td.Offset + td.Bytes
		}
		if !allZero(b[end:]) {
			t.Errorf("extent %d: padding after %d is not zero", i, end)
		}
	}
	if prev != int64(len(data)) {
		t.Errorf("file is %d bytes, last extent ends at %d", len(data), prev)
	}
	if len(man.Layers) == 0 {
		t.Errorf("no layers")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// copyPool copies a pool so a test can damage it.
func copyPool(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "damaged.pool")
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestPoolCorruptExtent damages one byte of one extent (a tensor byte, or
// padding) and requires exactly that extent to be refused, by name, on
// every path that uses it, while every other extent still works.
func TestPoolCorruptExtent(t *testing.T) {
	t.Parallel()
	good, _ := prefab(t, t.TempDir(), "gemma2", "f32", TypeKeep)
	gp, err := OpenPool(good)
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	n := gp.NumLayers()
	cases := []struct {
		name   string
		extent int // layer index, or n for the globals
		at     func(e tier.Extent) int64
	}{
		{"layer 2 first byte", 2, func(e tier.Extent) int64 { return e.Offset }},
		{"layer 2 padding", 2, func(e tier.Extent) int64 { return e.End() - 1 }},
		{"layer 0 middle", 0, func(e tier.Extent) int64 { return e.Offset + e.Length/2 }},
		{"globals", n, func(e tier.Extent) int64 { return e.Offset + 100 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := copyPool(t, good)
			var e tier.Extent
			want := "extent globals"
			if c.extent < n {
				e = gp.Extent(c.extent)
				want = "extent layer " + itoa(c.extent)
			} else {
				e = gp.GlobalsExtent()
			}
			flipByte(t, path, c.at(e))
			p, err := OpenPool(path)
			if err != nil {
				t.Fatalf("OpenPool must not read extents, got %v", err)
			}
			defer p.Close()
			// Every other layer still works, through both paths.
			for i := 0; i < n; i++ {
				b, err := p.Mapped(i)
				if i == c.extent {
					if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
						t.Fatalf("Mapped(%d) = %v, want an ErrCorrupt naming %q", i, err, want)
					}
					// The verdict sticks.
					if _, err2 := p.Mapped(i); err2 == nil {
						t.Fatalf("second Mapped(%d) succeeded", i)
					}
					raw := make([]byte, e.Length)
					f, _ := os.Open(path)
					f.ReadAt(raw, e.Offset)
					f.Close()
					if err := p.Verify(i, raw); err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("Verify(%d) = %v, want an error naming %q", i, err, want)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Mapped(%d): %v (only %s is damaged)", i, err, want)
				}
				if err := p.Verify(i, append([]byte(nil), b...)); err != nil {
					t.Fatalf("Verify(%d): %v", i, err)
				}
				if _, err := p.Decode(i, b); err != nil {
					t.Fatalf("Decode(%d): %v", i, err)
				}
			}
			_, gerr := p.Globals()
			if (c.extent == n) != (gerr != nil) {
				t.Fatalf("Globals() = %v with %s damaged", gerr, want)
			}
			if _, err := p.Model(); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Model() = %v, want an error naming %q", err, want)
			}
		})
	}
}

// TestPoolTruncated cuts a pool at several points; OpenPool must refuse
// each with an error that says what is missing.
func TestPoolTruncated(t *testing.T) {
	t.Parallel()
	good, _ := prefab(t, t.TempDir(), "llama", "f32", TypeKeep)
	gp, err := OpenPool(good)
	if err != nil {
		t.Fatal(err)
	}
	last := gp.Extent(gp.NumLayers() - 1)
	first := gp.Extent(0)
	glob := gp.GlobalsExtent()
	gp.Close()
	cases := []struct {
		name string
		size int64
		want string
	}{
		{"empty", 0, "truncated header"},
		{"half header", 30, "truncated header"},
		{"header only", 64, "truncated manifest"},
		{"inside manifest", 200, "truncated manifest"},
		{"inside globals", glob.Offset + 10, "extent globals"},
		{"inside layer 0", first.Offset + first.Length/2, "extent layer 0"},
		{"last page", last.End() - 1, "extent layer " + itoa(gp.NumLayers()-1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := copyPool(t, good)
			if err := os.Truncate(path, c.size); err != nil {
				t.Fatal(err)
			}
			p, err := OpenPool(path)
			if err == nil {
				p.Close()
				t.Fatal("OpenPool accepted a truncated pool")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrCorrupt mentioning %q", err, c.want)
			}
		})
	}
}

// TestPoolBadHeader damages the header and the manifest.
func TestPoolBadHeader(t *testing.T) {
	t.Parallel()
	good, _ := prefab(t, t.TempDir(), "llama", "f32", TypeKeep)
	rehash := func(b []byte) { binary.LittleEndian.PutUint64(b[40:], xxh3.Hash(b[:40])) }
	cases := []struct {
		name   string
		damage func(b []byte)
		want   string
	}{
		{"magic", func(b []byte) { b[0] = 'X' }, "bad magic"},
		{"magic tail", func(b []byte) { b[10] = 1 }, "bad magic"},
		{"version", func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 2); rehash(b) }, "unsupported pool version 2"},
		{"header checksum", func(b []byte) { b[44] ^= 1 }, "header checksum"},
		{"header field", func(b []byte) { b[24] ^= 1 }, "header checksum"},
		{"manifest byte", func(b []byte) { b[100] ^= 1 }, "manifest checksum"},
		{"manifest checksum", func(b []byte) { b[32] ^= 1; rehash(b) }, "manifest checksum"},
		{"manifest length", func(b []byte) { binary.LittleEndian.PutUint64(b[24:], 1<<40); rehash(b) }, "manifest length"},
		{"manifest offset", func(b []byte) { binary.LittleEndian.PutUint64(b[16:], 128); rehash(b) }, "manifest offset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := copyPool(t, good)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c.damage(b)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := OpenPool(path)
			if err == nil {
				p.Close()
				t.Fatal("OpenPool accepted a damaged header")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrCorrupt mentioning %q", err, c.want)
			}
		})
	}
}

// TestManifestValidation rewrites a valid manifest (with a matching
// checksum) in ways that break the layout rules.
func TestManifestValidation(t *testing.T) {
	t.Parallel()
	m, v := miniModel(t)
	good := filepath.Join(t.TempDir(), "mini.pool")
	if err := WriteModelPool(m, v, good, Options{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(m *manifest)
		want string
	}{
		{"format", func(m *manifest) { m.Format = "other" }, "format"},
		{"arch", func(m *manifest) { m.Arch = "gpt9" }, "unsupported architecture"},
		{"layer count", func(m *manifest) { m.Layers = m.Layers[:1] }, "1 layer extents"},
		{"misaligned extent", func(m *manifest) { m.Layers[1].Offset += 64 }, "extent layer 1: offset"},
		{"overlapping extents", func(m *manifest) { m.Layers[1].Offset = m.Layers[0].Offset }, "extent layer 1: offset"},
		{"odd length", func(m *manifest) { m.Layers[0].Length = 100 }, "extent layer 0: length"},
		{"tensor order", func(m *manifest) {
			ts := m.Layers[0].Tensors
			ts[1], ts[2] = ts[2], ts[1]
		}, "kernel order"},
		{"tensor misaligned", func(m *manifest) { m.Layers[0].Tensors[1].Offset += 4 }, "64-aligned"},
		{"tensor past extent", func(m *manifest) { m.Layers[0].Tensors[8].Offset = m.Layers[0].Length }, "inside the"},
		{"tensor overlap", func(m *manifest) { m.Layers[0].Tensors[2].Offset = m.Layers[0].Tensors[1].Offset }, "after"},
		{"tensor type", func(m *manifest) { m.Layers[0].Tensors[1].Type = "Q9_9" }, "unknown type"},
		{"norm type", func(m *manifest) { m.Layers[0].Tensors[0].Type = "F16" }, "norms must be F32"},
		{"tensor dims", func(m *manifest) { m.Layers[0].Tensors[1].Dims = []uint64{32, 31} }, "dims"},
		{"tensor bytes", func(m *manifest) { m.Layers[0].Tensors[1].Bytes-- }, "needs"},
		{"checksum", func(m *manifest) { m.Layers[0].XXH3 = "xyz" }, "16 hex digits"},
		{"vocab size", func(m *manifest) {
			m.Vocab.Tokens, m.Vocab.Types, m.Vocab.BOS, m.Vocab.EOS = m.Vocab.Tokens[:3], m.Vocab.Types[:3], 0, 1
		}, "tokenizer has 3 tokens"},
		{"token types", func(m *manifest) { m.Vocab.Types = m.Vocab.Types[:3] }, "3 token types"},
		{"special id", func(m *manifest) { m.Vocab.BOS = 99 }, "special token id 99"},
		{"config", func(m *manifest) { m.Config.Heads = 3; m.Config.KVHeads = 2 }, "config: heads 3 not divisible"},
		{"config shape", func(m *manifest) { m.Config.Heads = 3 }, "blk.0.attn_q.weight: dims"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(good)
			if err != nil {
				t.Fatal(err)
			}
			mlen := binary.LittleEndian.Uint64(b[24:])
			var man manifest
			if err := json.Unmarshal(b[64:64+mlen], &man); err != nil {
				t.Fatal(err)
			}
			c.edit(&man)
			mb, err := json.Marshal(&man)
			if err != nil {
				t.Fatal(err)
			}
			if first := int64(binary.LittleEndian.Uint64(b[16:]) + mlen); int64(len(mb))+64 > hostmem.AlignUp(first, 4096) {
				t.Fatalf("edited manifest of %d bytes would overwrite the first extent", len(mb))
			}
			img := append(encodeHeader(mb), mb...)
			img = append(img, b[len(img):]...)
			_, err = parseLayout(img)
			if err == nil {
				t.Fatal("parseLayout accepted the edited manifest")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrCorrupt mentioning %q", err, c.want)
			}
		})
	}
}

// TestMiniPool checks the in-memory writer path and a vocabulary with a
// token that is not valid UTF-8.
func TestMiniPool(t *testing.T) {
	t.Parallel()
	m, v := miniModel(t)
	path := filepath.Join(t.TempDir(), "mini.pool")
	var calls int
	var last, total int64
	err := WriteModelPool(m, v, path, Options{Type: TypeINT8, Progress: func(d, tot int64) {
		if d < last {
			t.Errorf("progress went back from %d to %d", last, d)
		}
		calls++
		last, total = d, tot
	}})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if calls == 0 || last != total || total != st.Size() {
		t.Errorf("progress: %d calls, last %d of %d, file %d bytes", calls, last, total, st.Size())
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	p, err := OpenPool(path)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !reflect.DeepEqual(p.Vocab(), v) {
		t.Errorf("vocab:\n got %+v\nwant %+v", p.Vocab(), v)
	}
	if p.Type() != TypeINT8 {
		t.Errorf("type %q", p.Type())
	}
	b, err := p.Mapped(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Decode(1, b[:8]); err == nil || !strings.Contains(err.Error(), "extent layer 1") {
		t.Errorf("Decode of a short buffer: %v", err)
	}
	big := append(append([]byte(nil), b...), make([]byte, 4096)...)
	if l, err := p.Decode(1, big); err != nil || l.Q.Type != quant.INT8Row {
		t.Errorf("Decode of a larger slot: %v", err)
	}
	if err := p.Verify(1, b[:len(b)-1]); err == nil {
		t.Errorf("Verify accepted a short buffer")
	}
	for _, i := range []int{-1, 2} {
		if _, err := p.Mapped(i); err == nil {
			t.Errorf("Mapped(%d) succeeded", i)
		}
		if _, err := p.Decode(i, b); err == nil {
			t.Errorf("Decode(%d) succeeded", i)
		}
		if err := p.Verify(i, b); err == nil {
			t.Errorf("Verify(%d) succeeded", i)
		}
	}
	if ok, err := IsPool(path); !ok || err != nil {
		t.Errorf("IsPool = %v, %v", ok, err)
	}
	if err := WriteModelPool(m, v, path, Options{Type: "q3"}); err == nil {
		t.Errorf("unknown prefab type accepted")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Mapped(0); err == nil {
		t.Errorf("Mapped after Close succeeded")
	}
}

// TestWriteFailures checks that a cancelled or failing prefab leaves
// neither the pool nor its temporary file behind.
func TestWriteFailures(t *testing.T) {
	t.Parallel()
	m, v := miniModel(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "x.pool")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteModelPool(m, v, path, Options{Context: ctx}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled write: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	for _, p := range append(left, path) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind after a cancelled write", p)
		}
	}
	if err := WriteModelPool(m, v, filepath.Join(dir, "no", "such", "dir.pool"), Options{}); err == nil {
		t.Errorf("write into a missing directory succeeded")
	}
	short := *v
	short.Tokens = short.Tokens[:4]
	if err := WriteModelPool(m, &short, path, Options{}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("mismatched vocabulary: %v", err)
	}
}
