package model

import (
	"context"
	"os"
	"testing"

	"github.com/strata-llm/strata/engine/gemv"
)

// benchModel opens a tiny synthetic model for benchmarks.
func benchModel(b *testing.B, arch, typ string) *Model {
	b.Helper()
	m, err := Open(synthModel(b, arch, typ))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func reportTokens(b *testing.B, tokens int) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
}

// benchDecode times decode steps of nseq sequences at once (one token
// each), starting from a 16-token prompt and resetting when the cache is
// full.
func benchDecode(b *testing.B, m *Model, nseq, maxCtx int) {
	ctx := context.Background()
	prompt := randTokens(16, m.Config.Vocab, 1)
	batch := make([]Step, nseq)
	refill := func() {
		for i := range batch {
			if batch[i].Seq == nil {
				batch[i].Seq = m.NewSequence(maxCtx)
			}
			batch[i].Seq.Reset()
			batch[i].Tokens = prompt
			if err := m.Forward(ctx, batch[i:i+1]); err != nil {
				b.Fatal(err)
			}
			batch[i].Tokens = []int32{int32(i)}
		}
	}
	refill()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if batch[0].Seq.Pos() == maxCtx {
			b.StopTimer()
			refill()
			b.StartTimer()
		}
		if err := m.Forward(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	reportTokens(b, b.N*nseq)
}

// BenchmarkDecode measures single-sequence decode throughput on the tiny
// synthetic shapes.
func BenchmarkDecode(b *testing.B) {
	for _, arch := range []string{ArchLlama, ArchGemma2} {
		for _, typ := range []string{"f32", "q4_k_m"} {
			b.Run(arch+"/"+typ, func(b *testing.B) { benchDecode(b, benchModel(b, arch, typ), 1, 128) })
		}
	}
}

// BenchmarkDecodeBatch measures decode with 8 sequences per pass, where
// each weight row is decoded once for all of them.
func BenchmarkDecodeBatch(b *testing.B) {
	for _, arch := range []string{ArchLlama, ArchGemma2} {
		for _, typ := range []string{"f32", "q4_k_m"} {
			b.Run(arch+"/"+typ, func(b *testing.B) { benchDecode(b, benchModel(b, arch, typ), 8, 128) })
		}
	}
}

// BenchmarkPrefill measures a 128-token prefill of one sequence.
func BenchmarkPrefill(b *testing.B) {
	for _, arch := range []string{ArchLlama, ArchGemma2} {
		for _, typ := range []string{"f32", "q4_k_m"} {
			b.Run(arch+"/"+typ, func(b *testing.B) {
				m := benchModel(b, arch, typ)
				const n = 128
				toks := randTokens(n, m.Config.Vocab, 2)
				seq := m.NewSequence(n)
				batch := []Step{{Seq: seq, Tokens: toks}}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					seq.Reset()
					if err := m.Forward(context.Background(), batch); err != nil {
						b.Fatal(err)
					}
				}
				reportTokens(b, b.N*n)
			})
		}
	}
}

// BenchmarkDecode8B runs decode steps of a real-size model (an 8b-shape
// q4_k_m GGUF, e.g. one written by synth) named by STRATA_BENCH_8B, on
// engine/gemv's best kernels for this machine (the CPU backend's) and on
// the float32 reference a Model starts on, each sub-benchmark named for
// its kernels: the reference is an order of magnitude slower at this
// size, so a figure without the name says little.
func BenchmarkDecode8B(b *testing.B) {
	path := os.Getenv("STRATA_BENCH_8B")
	if path == "" {
		b.Skip("set STRATA_BENCH_8B=path/to/model.gguf (an 8b-shape q4_k_m GGUF) to run this benchmark")
	}
	m, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.Logf("%s: %d layers, dim %d, vocab %d", path, m.Config.Layers, m.Config.Dim, m.Config.Vocab)
	impl := gemv.Detect()
	b.Run(impl.String(), func(b *testing.B) {
		m.UseGEMV(impl)
		benchDecode(b, m, 1, 64)
	})
	b.Run("reference", func(b *testing.B) {
		m.UseReference()
		benchDecode(b, m, 1, 64)
	})
}
