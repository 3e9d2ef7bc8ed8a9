package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// benchParagraph is ordinary English prose with some punctuation, numbers
// and contractions.
const benchParagraph = `The history of computing is a story of abstraction. Early machines were
programmed by rewiring panels; later, engineers wrote numeric codes that the
hardware executed directly. Assembly languages gave those codes names, and
compilers, which appeared in the 1950s, let people describe computations in
something closer to mathematics. Each layer hid details that had once seemed
essential: you don't think about vacuum tubes when you write a loop, and you
rarely think about registers when you call a library. Yet the details never
vanish entirely. When a program runs slowly, or fails in a way that seems
impossible, the lower layers reassert themselves. A cache line of 64 bytes, a
page of 4096 bytes, a branch that the predictor guessed wrong 3.5% of the
time - these are the places where "it should work" meets "it doesn't". Good
engineers learn to move between layers quickly, holding a model of each in
their heads, and they're suspicious of any abstraction that claims to be free.
`

// benchText returns about n bytes of English text.
func benchText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Section %d.\n\n%s\n", i+1, benchParagraph)
	}
	return b.String()
}

func BenchmarkEncode(b *testing.B) {
	text := benchText(256 << 10)
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		tok := load(b, path)
		name := "bpe"
		if tok.Vocab().Model == ModelLlama {
			name = "spm"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var n int
			for b.Loop() {
				n = len(tok.Encode(text, true, false))
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	text := benchText(256 << 10)
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		tok := load(b, path)
		ids := tok.Encode(text, true, false)
		b.Run(tok.Vocab().Model, func(b *testing.B) {
			for b.Loop() {
				_ = tok.Decode(ids)
			}
			b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		b.Run(path[len("testdata/"):], func(b *testing.B) {
			for b.Loop() {
				if _, err := FromGGUFFile(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
