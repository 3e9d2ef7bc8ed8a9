package sched

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/grammar"
	"github.com/strata-llm/strata/engine/sample"
)

// A schema whose every valid text is short, so that even a random-weight
// model finishes it within the token limit.
const boundedSchema = `{"type":"object","properties":{"ok":{"type":"boolean"},"pick":{"enum":["x","yz",null]},"n":{"type":"integer"}},"required":["ok","pick"],"additionalProperties":false}`

func tinyMatcher(t *testing.T, e *engine.Engine, schema string) *grammar.Matcher {
	t.Helper()
	g, err := grammar.FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	v, err := grammar.VocabFromTokenizer(e.Tok)
	if err != nil {
		t.Fatal(err)
	}
	m, err := grammar.NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkOutput requires a completed constrained generation whose text the
// grammar accepts and which parses as a JSON object.
func checkOutput(t *testing.T, m *grammar.Matcher, res Result) {
	t.Helper()
	if res.FinishReason != "stop" {
		t.Fatalf("finish %q after %q; want stop", res.FinishReason, res.Text)
	}
	s, err := m.AdvanceBytes(m.Start(), []byte(res.Text))
	if err != nil || s == grammar.Dead || !m.Accepting(s) {
		t.Fatalf("output %q is not a sentence of the grammar (%v)", res.Text, err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(res.Text), &v); err != nil {
		t.Fatalf("output %q does not parse: %v", res.Text, err)
	}
	if _, ok := v["ok"].(bool); !ok {
		t.Fatalf("output %q lacks the required boolean", res.Text)
	}
}

// TestGrammarConstrains runs the random-weight tiny model, whose free
// output is noise, under a JSON Schema: greedy and sampled, with and
// without speculation (whose guesses are verified under the mask and
// must leave the output unchanged).
func TestGrammarConstrains(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	self := openEngine(t, tinyPath)
	m := tinyMatcher(t, e, boundedSchema)
	prompt := e.Tok.Encode("answer in JSON", true, false)
	for _, p := range []sample.Params{
		sample.Greedy(),
		{Temperature: 0.8, TopP: 0.95, TopK: 40, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 16, Seed: 3},
		{Temperature: 1.5, TopP: 1, RepeatPenalty: 1, Seed: 9},
	} {
		req := Request{Prompt: prompt, MaxTokens: 200, Sample: p, Grammar: m, LogitBias: map[int32]float32{5: 50}}
		free := req
		free.Grammar = nil
		plain, err := Generate(context.Background(), e.Backend(), e.Tok, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkOutput(t, m, plain)
		if noise, err := Generate(context.Background(), e.Backend(), e.Tok, free, nil); err != nil || json.Valid([]byte(noise.Text)) {
			t.Fatalf("unconstrained output %q (%v) is JSON: the test proves nothing", noise.Text, err)
		}
		for _, d := range []Drafter{ModelDrafter{B: self.Backend()}, Lookup{MinN: 1, MaxN: 3}} {
			res, err := GenerateWith(context.Background(), e.Backend(), e.Tok, req, GenerateOptions{Drafter: d, MaxDraft: 4}, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkOutput(t, m, res)
			if p.Temperature == 0 && !slices.Equal(res.Tokens, plain.Tokens) {
				t.Fatalf("%s drafter: tokens %v, plain %v", d.Name(), res.Tokens, plain.Tokens)
			}
			if d.Name() == "model" && res.Drafted == 0 {
				t.Fatalf("the self drafter guessed nothing")
			}
		}
	}
}

// TestGrammarInABatch: constrained and free requests share passes; each
// constrained one still completes under its own grammar.
func TestGrammarInABatch(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	m := tinyMatcher(t, e, boundedSchema)
	s := start(t, e, Config{MaxBatch: 4})
	prompt := e.Tok.Encode("batch", true, false)
	var hs []*Handle
	for i := range 4 {
		r := Request{Prompt: prompt, MaxTokens: 200, Sample: sample.Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: uint64(i)}}
		if i%2 == 0 {
			r.Grammar = m
		}
		hs = append(hs, mustSubmit(t, s, r))
	}
	for i, h := range hs {
		text, last, _ := collect(h)
		if last.Err != nil {
			t.Fatal(last.Err)
		}
		if i%2 == 0 {
			checkOutput(t, m, Result{Text: text, FinishReason: last.Finish})
		}
	}
}

func TestGrammarVocabMismatch(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	g, err := grammar.Parse(`root ::= "a"`)
	if err != nil {
		t.Fatal(err)
	}
	v, err := grammar.NewVocab(make([][]byte, e.Backend().Config().Vocab+1), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := grammar.NewMatcher(g, v)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, e, Config{})
	if _, err := s.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1, Sample: sample.Greedy(), Grammar: m}); err == nil {
		t.Fatal("a grammar over a larger vocabulary was accepted")
	}
}
