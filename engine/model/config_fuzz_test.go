package model

import (
	"bytes"
	"io"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/quant"
)

// FuzzConfigFromGGUF loads a model's hyperparameters from arbitrary
// metadata (the architecture, every size and count, the norm epsilon, the
// RoPE base, the embedding's shape): the parser never panics, and a
// config it accepts gives the memory estimates the planner uses without
// overflow.
func FuzzConfigFromGGUF(f *testing.F) {
	f.Add(uint8(0), uint32(256), uint32(64), uint32(2), uint32(172), uint32(4), uint32(2), uint32(0), float32(1e-5), float32(10000), uint32(32), uint32(0), uint32(0))
	f.Add(uint8(1), uint32(8192), uint32(2304), uint32(26), uint32(9216), uint32(8), uint32(4), uint32(256), float32(1e-6), float32(10000), uint32(256000), uint32(4096), uint32(256))
	f.Add(uint8(0), uint32(1<<31-1), uint32(1<<20), uint32(1<<20), uint32(1<<20), uint32(1), uint32(1), uint32(0), float32(0), float32(-1), uint32(1), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, archIdx uint8, ctx, dim, layers, ffn, heads, kvHeads, keyLen uint32, eps, theta float32, vocab, window, vocabKey uint32) {
		arch := archs[int(archIdx)%len(archs)]
		w := gguf.NewWriter(3)
		kv := func(k string, v any) {
			if err := w.AddKV(k, v); err != nil {
				t.Fatal(err)
			}
		}
		kv("general.architecture", arch)
		kv(arch+".context_length", ctx)
		kv(arch+".embedding_length", dim)
		kv(arch+".block_count", layers)
		kv(arch+".feed_forward_length", ffn)
		kv(arch+".attention.head_count", heads)
		kv(arch+".attention.head_count_kv", kvHeads)
		if keyLen != 0 {
			kv(arch+".attention.key_length", keyLen)
		}
		if window != 0 {
			kv(arch+".attention.sliding_window", window)
		}
		if vocabKey != 0 {
			kv(arch+".vocab_size", vocabKey)
		}
		kv(arch+".attention.layer_norm_rms_epsilon", eps)
		kv(arch+".rope.freq_base", theta)
		// The embedding's shape is declared; its bytes are written only
		// when small (a huge declared tensor is refused by the reader).
		if uint64(dim)*uint64(vocab) > 1<<16 {
			return
		}
		if err := w.AddTensor("token_embd.weight", quant.F32, []uint64{uint64(dim), uint64(vocab)}); err != nil {
			return
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf, func(_ int, ti gguf.TensorInfo, dst io.Writer) error {
			_, err := dst.Write(make([]byte, ti.Size))
			return err
		}); err != nil {
			return
		}
		file, err := gguf.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		if err != nil {
			t.Fatalf("the writer's own file: %v", err)
		}
		c, err := ConfigFromGGUF(file)
		if err != nil {
			if archIdx == 0 && ctx == 256 && dim == 64 && layers == 2 && ffn == 172 && heads == 4 && kvHeads == 2 && keyLen == 0 &&
				eps == 1e-5 && theta == 10000 && vocab == 32 && window == 0 && vocabKey == 0 {
				t.Fatalf("the llama seed was refused: %v", err) // the target must reach its checks
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid config %+v: %v", c, err)
		}
		if kvb := KVCacheBytes(c, c.Context, 1); kvb < 0 {
			t.Fatalf("KV cache of %+v overflows: %d", c, kvb)
		}
		if sb := ScratchBytes(c, c.Context, 1, 1); sb < 0 {
			t.Fatalf("scratch of %+v overflows: %d", c, sb)
		}
	})
}
