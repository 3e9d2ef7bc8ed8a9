package prefab

import (
	"path/filepath"
	"testing"

	"github.com/strata-llm/strata/engine/gguf"
)

// BenchmarkPrefab measures WritePool throughput (source tensor bytes per
// second, reported as MB/s) on the tiny llama for each prefab type. Q4_K is
// bound by quantization (about 10M elements/s per core); keep by the copy
// and the write.
func BenchmarkPrefab(b *testing.B) {
	for _, c := range []struct{ src, typ string }{
		{"f32", TypeKeep}, {"f32", TypeQ8_0}, {"f32", TypeINT8}, {"f32", TypeQ4_K},
	} {
		b.Run(c.src+"-to-"+c.typ, func(b *testing.B) {
			src := synthModel(b, "llama", c.src)
			m, err := gguf.Map(src)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			var n int64
			for _, t := range m.Tensors {
				n += t.Size
			}
			out := filepath.Join(b.TempDir(), "bench.pool")
			b.SetBytes(n)
			b.ResetTimer()
			for range b.N {
				if err := WritePool(m, out, Options{Type: c.typ}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
