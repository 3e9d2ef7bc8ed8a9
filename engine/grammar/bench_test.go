package grammar

import (
	"math/rand/v2"
	"testing"

	"github.com/strata-llm/strata/engine/sample"
)

// benchSchema is a typical structured-output schema: an object with a
// string, an integer, an enum, an array of strings and a nested object.
const benchSchema = `{"type":"object","properties":{
 "name":{"type":"string"},"age":{"type":"integer"},
 "mood":{"enum":["happy","sad","neutral"]},
 "tags":{"type":"array","items":{"type":"string"},"maxItems":8},
 "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","maxLength":10}},"required":["city"]}},
 "required":["name","age","mood","tags","address"],"additionalProperties":false}`

// BenchmarkMaskCold is the cost of a state's first mask over the
// 128k-token Llama 3 vocabulary: one walk of the token trie. A fresh
// Matcher each round, so nothing is cached.
func BenchmarkMaskCold(b *testing.B) {
	v := testVocab(b, "llama-bpe")
	g, err := FromJSONSchema([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, prefix string }{
		{"object-start", ""},
		{"string-body", `{"name":"Al`},
		{"integer", `{"name":"Al","age":4`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				m, err := NewMatcher(g, v)
				if err != nil {
					b.Fatal(err)
				}
				s, err := m.AdvanceBytes(m.Start(), []byte(c.prefix))
				if err != nil || s == Dead {
					b.Fatalf("prefix %q: %v", c.prefix, err)
				}
				if _, err := m.Allowed(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMaskStep is the constraint's cost per decode step in the
// common case, the state's mask already computed: accept the chosen
// token, look up the next state's mask and apply it to a 128k logit row.
// The steps replay a generation recorded under the schema; the Matcher
// has met its states once, as a server's shared Matcher has after its
// first requests.
func BenchmarkMaskStep(b *testing.B) {
	v := testVocab(b, "llama-bpe")
	g, err := FromJSONSchema([]byte(benchSchema))
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMatcher(g, v)
	if err != nil {
		b.Fatal(err)
	}
	// Record a generation's tokens.
	rng := rand.New(rand.NewPCG(7, 8))
	smp, err := sample.New(sample.Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	logits := make([]float32, v.Size())
	var toks []int32
	s := m.Start()
	for len(toks) < 400 {
		if done, _ := m.Done(s); done {
			break
		}
		mask, err := m.Allowed(s)
		if err != nil {
			b.Fatal(err)
		}
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		mask.Apply(logits)
		id := smp.Sample(logits, nil)
		if v.pieces[id] == nil {
			break
		}
		if s, err = m.Accept(s, id); err != nil {
			b.Fatal(err)
		}
		toks = append(toks, id)
	}
	row := make([]float32, v.Size())
	for i := range row {
		row[i] = float32(rng.NormFloat64())
	}
	scratch := make([]float32, v.Size())
	b.Run("warm", func(b *testing.B) { replay(b, func() *Matcher { return m }, toks, row, scratch) })
	// cold: a fresh Matcher per generation, every mask computed on the
	// way (a server's first request with a new schema).
	b.Run("cold", func(b *testing.B) {
		replay(b, func() *Matcher {
			m, err := NewMatcher(g, v)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}, toks, row, scratch)
	})
}

func replay(b *testing.B, matcher func() *Matcher, toks []int32, row, scratch []float32) {
	steps := 0
	var m *Matcher
	for b.Loop() {
		m = matcher()
		s := m.Start()
		for _, id := range toks {
			mask, err := m.Allowed(s)
			if err != nil {
				b.Fatal(err)
			}
			copy(scratch, row)
			mask.Apply(scratch)
			if s, err = m.Accept(s, id); err != nil {
				b.Fatal(err)
			}
			steps++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/token")
	b.ReportMetric(float64(len(toks)), "tokens/op")
	b.ReportMetric(float64(m.States()), "states")
}
