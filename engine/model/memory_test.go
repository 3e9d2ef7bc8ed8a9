package model

import "testing"

func TestKVAndScratch(t *testing.T) {
	t.Parallel()
	cfg := Config{Layers: 32, KVHeads: 8, HeadDim: 128, Dim: 4096, Heads: 32, FFN: 14336, Vocab: 128256}
	if got, want := KVCacheBytes(cfg, 8192, 2), int64(2*32*8192*1024*4*2); got != want {
		t.Errorf("KVCacheBytes = %d, want %d", got, want)
	}
	s1 := ScratchBytes(cfg, 8192, 1, 2)
	s8 := ScratchBytes(cfg, 8192, 8, 2)
	if s1 <= 128256*4 || s8 <= s1 {
		t.Errorf("ScratchBytes %d (1 token), %d (8 tokens)", s1, s8)
	}
}
