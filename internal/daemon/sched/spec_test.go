package sched

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/sample"
)

// TestLookupPropose: the longest repeated suffix proposes what followed
// its latest earlier occurrence.
func TestLookupPropose(t *testing.T) {
	t.Parallel()
	l := Lookup{MinN: 1, MaxN: 3}
	for _, tc := range []struct {
		h    []int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3}, 3, []int32{4, 9, 1}},
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3}, 1, []int32{4}},
		{[]int32{5, 6, 7, 5, 6, 8, 5, 6}, 2, []int32{8, 5}}, // the latest occurrence
		{[]int32{1, 2, 3}, 4, nil},
		{[]int32{7, 1, 7}, 4, []int32{1, 7}},
	} {
		d, err := l.Open(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Propose(context.Background(), tc.h, tc.k)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Propose(%v, %d) = %v, %v; want %v", tc.h, tc.k, got, err, tc.want)
		}
	}
	if _, err := (Lookup{MinN: 0, MaxN: 2}).Open(0, 0); err == nil {
		t.Error("n-gram size 0 accepted")
	}
}

// TestSpeculationIsLossless: at temperature 0 every drafter gives exactly
// plain decoding's tokens — the model drafting for itself (every guess
// right), another model (a different network: most guesses wrong) and
// prompt lookup — and the guesses are counted; above 0, speculative runs
// produce valid text of the requested length.
func TestSpeculationIsLossless(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	self := openEngine(t, tinyPath)
	other := openEngine(t, tinyPath2)
	early, err := engine.OpenSelfDraft(context.Background(), tinyPath, e, 1, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if got, want := early.Skipped(), e.Model.Config.Layers-1; len(got) != want || got[0] != 1 {
		t.Fatalf("self-draft of 1 layer skips %v, want layers 1..%d", got, want)
	}
	for _, bad := range []int{-1, e.Model.Config.Layers, e.Model.Config.Layers + 3} {
		if d, err := engine.OpenSelfDraft(context.Background(), tinyPath, e, bad, engine.Options{}); err == nil {
			d.Close()
			t.Errorf("self-draft of %d layers: no error", bad)
		}
	}
	prompt := e.Tok.Encode("speculate, then verify, then speculate again", true, false)
	req := Request{Prompt: prompt, MaxTokens: 40, Sample: sample.Greedy()}
	plain, err := Generate(context.Background(), e.Backend(), e.Tok, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		d       Drafter
		allGood bool
	}{
		{"self", ModelDrafter{B: self.Backend()}, true},
		{"other", ModelDrafter{B: other.Backend()}, false},
		{"lookup", Lookup{MinN: 1, MaxN: 4}, false},
		{"early exit", ModelDrafter{B: early.Backend(), Label: "self"}, false},
	} {
		res, err := GenerateWith(context.Background(), e.Backend(), e.Tok, req, GenerateOptions{Drafter: tc.d, MaxDraft: 6}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(res.Tokens, plain.Tokens) {
			t.Fatalf("%s: tokens %v, plain %v", tc.name, res.Tokens, plain.Tokens)
		}
		t.Logf("%s: %d passes for %d tokens (plain %d), %d of %d guesses accepted", tc.name, res.Passes, len(res.Tokens), plain.Passes, res.Accepted, res.Drafted)
		if tc.allGood && (res.Drafted == 0 || res.Accepted != res.Drafted || res.Passes >= plain.Passes) {
			t.Errorf("%s: %d of %d guesses accepted in %d passes (plain %d)", tc.name, res.Accepted, res.Drafted, res.Passes, plain.Passes)
		}
		if tc.name == "other" && res.Drafted == 0 {
			t.Errorf("%s: nothing drafted", tc.name)
		}
	}
	hot := req
	hot.Sample = sample.Params{Temperature: 0.9, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 7}
	res, err := GenerateWith(context.Background(), e.Backend(), e.Tok, hot, GenerateOptions{Drafter: ModelDrafter{B: self.Backend()}}, nil)
	if err != nil || len(res.Tokens) == 0 || res.Drafted == 0 {
		t.Fatalf("sampling with a drafter: %v, %d tokens, %d drafted", err, len(res.Tokens), res.Drafted)
	}
	off := req
	off.NoSpeculation = true
	if res, err := GenerateWith(context.Background(), e.Backend(), e.Tok, off, GenerateOptions{Drafter: Lookup{MinN: 1, MaxN: 3}}, nil); err != nil || res.Drafted != 0 {
		t.Fatalf("NoSpeculation: %v, %d drafted", err, res.Drafted)
	}
}

// TestSpeculationOnGocode: the real pair of ../shared/models — gocode-29m
// verifying the 4-layer gocode-draft-20m's guesses, and prompt lookup —
// reproduces plain greedy decoding on the golden prompts, with the
// acceptance logged. It skips without the models (STRATA_GOCODE_GGUF).
func TestSpeculationOnGocode(t *testing.T) {
	t.Parallel()
	target := os.Getenv("STRATA_GOCODE_GGUF")
	if target == "" {
		t.Skip("STRATA_GOCODE_GGUF is not set")
	}
	draft := strings.Replace(target, "gocode-29m-f16", "gocode-draft-20m-f16", 1)
	if _, err := os.Stat(draft); err != nil {
		t.Skipf("no draft model beside the target: %v", err)
	}
	tg := openEngine(t, target)
	dr := openEngine(t, draft)
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) < 2 {\n"
	req := Request{Prompt: tg.Tok.Encode(src, true, false), MaxTokens: 64, Sample: sample.Greedy()}
	plain, err := Generate(context.Background(), tg.Backend(), tg.Tok, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	early, err := engine.OpenSelfDraft(context.Background(), target, tg, 4, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	for _, d := range []Drafter{ModelDrafter{B: dr.Backend()}, Lookup{MinN: 1, MaxN: 4}, ModelDrafter{B: early.Backend(), Label: "self"}} {
		res, err := GenerateWith(context.Background(), tg.Backend(), tg.Tok, req, GenerateOptions{Drafter: d}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, plain.Tokens) {
			t.Fatalf("%s: tokens differ from plain decoding:\n%q\n%q", d.Name(), res.Text, plain.Text)
		}
		rate := 0.0
		if res.Drafted > 0 {
			rate = float64(res.Accepted) / float64(res.Drafted)
		}
		t.Log(fmt.Sprintf("%s: %d tokens in %d passes (plain %d); %d of %d guesses accepted (%.2f)", d.Name(), len(res.Tokens), res.Passes, plain.Passes, res.Accepted, res.Drafted, rate))
	}
}

// TestSpeculationInABatch: several greedy requests share passes, each
// verifying its own guesses (a drafter that is the model itself for some,
// none for one that opted out): every request's tokens are what it gets
// alone without speculation.
func TestSpeculationInABatch(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	self := openEngine(t, tinyPath)
	prompts := []string{"first of three", "the second request", "and a third, longer prompt to read"}
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		res, err := Generate(context.Background(), e.Backend(), e.Tok, Request{Prompt: e.Tok.Encode(p, true, false), MaxTokens: 20 + 5*i, Sample: sample.Greedy()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Tokens
	}
	s := New(e.Backend(), e.Tok, Config{MaxBatch: 3, Drafter: ModelDrafter{B: self.Backend()}, MaxDraft: 4})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	defer s.Close(context.Canceled)
	hs := make([]*Handle, len(prompts))
	for i, p := range prompts {
		h, err := s.Submit(context.Background(), Request{Prompt: e.Tok.Encode(p, true, false), MaxTokens: 20 + 5*i, Sample: sample.Greedy(), NoSpeculation: i == 1})
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	for i, h := range hs {
		if got := tokensOf(t, h); !slices.Equal(got, want[i]) {
			t.Fatalf("request %d: %v, alone %v", i, got, want[i])
		}
	}
	if st := s.Stats(); st.Drafted == 0 || st.Accepted != st.Drafted || st.VerifyPasses == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDraftReadsPromptAsTarget: a draft model reads the request's prompt
// as prompt tokens, as the target does (the CPU's tile path where it has
// one), so a draft of the target's own weights ends the prompt, and the
// generated tokens after it, with the target's logits bit for bit; read
// as generated tokens, a tiled prompt's cache would differ.
func TestDraftReadsPromptAsTarget(t *testing.T) {
	t.Parallel()
	e := openTiny(t)
	self := openEngine(t, tinyPath)
	ctx := context.Background()
	prompt := e.Tok.Encode("the prompt a draft reads as its target does", true, false)
	gen := []int32{7, 11}
	seq, err := e.Backend().NewSequence(64)
	if err != nil {
		t.Fatal(err)
	}
	defer seq.Close()
	steps := []model.Step{{Seq: seq, Tokens: prompt, Prompt: true}}
	if err := e.Backend().Forward(ctx, steps); err != nil {
		t.Fatal(err)
	}
	afterPrompt := slices.Clone(steps[0].Logits[0])
	steps[0] = model.Step{Seq: seq, Tokens: gen}
	if err := e.Backend().Forward(ctx, steps); err != nil {
		t.Fatal(err)
	}
	afterGen := slices.Clone(steps[0].Logits[0])
	for _, c := range []struct {
		name    string
		history []int32
		want    []float32
	}{{"the prompt", prompt, afterPrompt}, {"the prompt and two tokens", append(slices.Clone(prompt), gen...), afterGen}} {
		d, err := ModelDrafter{B: self.Backend()}.Open(64, len(prompt))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Propose(ctx, c.history, 1); err != nil {
			t.Fatal(err)
		}
		md := d.(*modelDraft)
		got := md.steps[0].Logits[len(md.steps[0].Logits)-1]
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: the draft's last logits differ from the target's", c.name)
		}
		d.Close()
	}
}
