package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/quant"
)

// fuzzSeedGGUF writes a very small but complete model of arch (a few KiB:
// one layer, dim 8, an 8-token SentencePiece vocabulary), every tensor the
// loader wants present with its shape, so that the fuzzer starts from
// files that load and mutates their metadata, tensor table and data.
func fuzzSeedGGUF(f *testing.F, arch string, experts int) []byte {
	f.Helper()
	cfg := model.Config{Arch: arch, Vocab: 8, Dim: 8, FFN: 16, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 4,
		Context: 16, Experts: experts, ExpertsUsed: min(experts, 1), ExpertFFN: 16}
	w := gguf.NewWriter(3)
	kv := func(k string, v any) {
		if err := w.AddKV(k, v); err != nil {
			f.Fatal(err)
		}
	}
	kv("general.architecture", arch)
	kv(arch+".context_length", uint32(cfg.Context))
	kv(arch+".embedding_length", uint32(cfg.Dim))
	kv(arch+".block_count", uint32(cfg.Layers))
	kv(arch+".feed_forward_length", uint32(cfg.FFN))
	kv(arch+".attention.head_count", uint32(cfg.Heads))
	kv(arch+".attention.head_count_kv", uint32(cfg.KVHeads))
	kv(arch+".attention.layer_norm_rms_epsilon", float32(1e-5))
	kv(arch+".rope.freq_base", float32(10000))
	if experts > 0 {
		kv(arch+".expert_count", uint32(experts))
		kv(arch+".expert_used_count", uint32(cfg.ExpertsUsed))
	}
	kv("tokenizer.ggml.model", "llama")
	kv("tokenizer.ggml.tokens", []string{"<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab"})
	kv("tokenizer.ggml.scores", []float32{0, 0, 0, -1, -2, -3, -4, -5})
	kv("tokenizer.ggml.token_type", []int32{2, 3, 3, 1, 1, 1, 1, 1})
	kv("tokenizer.ggml.bos_token_id", uint32(1))
	kv("tokenizer.ggml.eos_token_id", uint32(2))
	kv("tokenizer.ggml.unknown_token_id", uint32(0))
	tensor := func(name string, dims ...uint64) {
		if err := w.AddTensor(name, quant.F32, dims); err != nil {
			f.Fatal(err)
		}
	}
	tensor("token_embd.weight", uint64(cfg.Dim), uint64(cfg.Vocab))
	tensor("output_norm.weight", uint64(cfg.Dim))
	tensor("output.weight", uint64(cfg.Dim), uint64(cfg.Vocab))
	for _, r := range cfg.LayerRoles() {
		if r.Vector {
			tensor("blk.0."+r.Suffix, uint64(r.Cols))
		} else {
			tensor("blk.0."+r.Suffix, uint64(r.Cols), uint64(r.Rows))
		}
	}
	if experts > 0 {
		e := uint64(experts)
		tensor("blk.0.ffn_gate_exps.weight", uint64(cfg.Dim), uint64(cfg.ExpertFFN), e)
		tensor("blk.0.ffn_up_exps.weight", uint64(cfg.Dim), uint64(cfg.ExpertFFN), e)
		tensor("blk.0.ffn_down_exps.weight", uint64(cfg.ExpertFFN), uint64(cfg.Dim), e)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf, func(i int, ti gguf.TensorInfo, dst io.Writer) error {
		b := make([]byte, ti.Size)
		for k := 0; k+4 <= len(b); k += 4 { // small varied weights, norms near 1
			binary.LittleEndian.PutUint32(b[k:], math.Float32bits(0.5+float32((i*7+k)%13)/26))
		}
		_, err := dst.Write(b)
		return err
	}); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// heapAllocs is the bytes the process has allocated on the heap so far.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzOpenGGUF loads arbitrary files as engine.Open does (the GGUF
// header, metadata and tensor table, the vocabulary, the config and every
// weight's presence, type and shape), then encodes a prompt and runs one
// forward step on what loaded: nothing panics, and the heap a load takes
// is bounded by the file's real size, whatever sizes and counts its
// metadata declares.
func FuzzOpenGGUF(f *testing.F) {
	path := filepath.Join(f.TempDir(), "fuzz.gguf")
	// One thread of compute: the forward pass's workers spin for a
	// varying while and share a step's rows by timing, which would make
	// one input's coverage differ from run to run.
	runtime.GOMAXPROCS(1)
	for _, s := range []struct {
		arch    string
		experts int
	}{{"llama", 0}, {"qwen3", 0}, {"qwen2", 0}, {"llama", 2}} {
		seed := fuzzSeedGGUF(f, s.arch, s.experts)
		// The seeds must load, or the target never gets past the checks.
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			f.Fatal(err)
		}
		e, err := engine.Open(context.Background(), path)
		if err != nil {
			f.Fatalf("seed %s with %d experts: %v", s.arch, s.experts, err)
		}
		e.Close()
		f.Add(seed)
		f.Add(seed[:len(seed)/2])
	}
	f.Add([]byte("GGUF"))
	// What one load may allocate beyond a few times the file: the
	// tokenizer's and model's fixed tables and the step's scratch.
	const slack = 64 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		before := heapAllocs()
		e, err := engine.Open(context.Background(), path)
		if took := heapAllocs() - before; took > 16*uint64(len(data))+slack {
			t.Fatalf("loading %d bytes allocated %d bytes (err %v)", len(data), took, err)
		}
		if err != nil {
			return
		}
		defer e.Close()
		c := e.Model.Config
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded an invalid config %+v: %v", c, err)
		}
		if e.Tok.VocabSize() != c.Vocab {
			t.Fatalf("tokenizer of %d tokens for a vocabulary of %d", e.Tok.VocabSize(), c.Vocab)
		}
		ids := e.Tok.Encode("ab a", true, false)
		for _, id := range ids {
			if id < 0 || int(id) >= c.Vocab {
				t.Fatalf("token id %d out of range [0, %d)", id, c.Vocab)
			}
		}
		if len(ids) == 0 {
			ids = []int32{0}
		}
		ids = ids[:min(len(ids), 2)]
		step := []model.Step{{Seq: e.Model.NewSequence(len(ids)), Tokens: ids}}
		before = heapAllocs()
		if err := e.Model.Forward(context.Background(), step); err != nil {
			return // weights that give NaN, a context shorter than the prompt: errors, not panics
		}
		if took := heapAllocs() - before; took > 16*uint64(len(data))+slack {
			t.Fatalf("one step of a %d-byte model allocated %d bytes", len(data), took)
		}
		if len(step[0].Logits) != 1 || len(step[0].Logits[0]) != c.Vocab {
			t.Fatalf("logits %d rows, want 1 of %d", len(step[0].Logits), c.Vocab)
		}
	})
}
