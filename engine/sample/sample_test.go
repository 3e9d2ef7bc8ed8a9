package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// randLogits returns n pseudo-random logits spread over a few units.
func randLogits(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func mustNew(t *testing.T, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	return s
}

func argmaxRef(l []float32) int32 {
	best := 0
	for i := range l {
		if l[i] > l[best] {
			best = i
		}
	}
	return int32(best)
}

func TestInvalidParams(t *testing.T) {
	t.Parallel()
	base := DefaultParams(1)
	nan := float32(math.NaN())
	tests := []struct {
		name string
		mod  func(p *Params)
	}{
		{"negative temperature", func(p *Params) { p.Temperature = -0.1 }},
		{"nan temperature", func(p *Params) { p.Temperature = nan }},
		{"inf temperature", func(p *Params) { p.Temperature = float32(math.Inf(1)) }},
		{"top_p zero", func(p *Params) { p.TopP = 0 }},
		{"top_p above one", func(p *Params) { p.TopP = 1.01 }},
		{"top_p negative", func(p *Params) { p.TopP = -0.5 }},
		{"min_p negative", func(p *Params) { p.MinP = -0.01 }},
		{"min_p above one", func(p *Params) { p.MinP = 1.5 }},
		{"top_k negative", func(p *Params) { p.TopK = -1 }},
		{"repeat penalty zero", func(p *Params) { p.RepeatPenalty = 0 }},
		{"repeat penalty negative", func(p *Params) { p.RepeatPenalty = -1 }},
		{"repeat last n below -1", func(p *Params) { p.RepeatLastN = -2 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := base
			tc.mod(&p)
			if _, err := New(p); err == nil {
				t.Fatalf("New(%+v) succeeded, want error", p)
			}
		})
	}
	t.Run("valid edge values", func(t *testing.T) {
		t.Parallel()
		for _, p := range []Params{
			Greedy(), base,
			{Temperature: 2, TopP: 1, MinP: 1, TopK: 0, RepeatPenalty: 1, RepeatLastN: -1},
			{Temperature: 0, TopP: 1e-9, MinP: 0, TopK: 1, RepeatPenalty: 0.5, RepeatLastN: 0},
		} {
			if _, err := New(p); err != nil {
				t.Errorf("New(%+v): %v", p, err)
			}
		}
	})
}

func TestGreedyIsArgmax(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 20; seed++ {
		l := randLogits(1000, seed)
		s := mustNew(t, Greedy())
		if got, want := s.Sample(l, nil), argmaxRef(l); got != want {
			t.Fatalf("seed %d: greedy = %d, argmax = %d", seed, got, want)
		}
	}
	t.Run("ties pick lowest id", func(t *testing.T) {
		t.Parallel()
		s := mustNew(t, Greedy())
		if got := s.Sample([]float32{1, 3, 3, 2}, nil); got != 1 {
			t.Fatalf("got %d, want 1", got)
		}
	})
	t.Run("nan ignored", func(t *testing.T) {
		t.Parallel()
		s := mustNew(t, Greedy())
		nan := float32(math.NaN())
		if got := s.Sample([]float32{nan, -5, nan, -1}, nil); got != 3 {
			t.Fatalf("got %d, want 3", got)
		}
	})
	t.Run("empty logits", func(t *testing.T) {
		t.Parallel()
		s := mustNew(t, Greedy())
		if got := s.Sample(nil, nil); got != -1 {
			t.Fatalf("got %d, want -1", got)
		}
	})
}

func TestSeedDeterminism(t *testing.T) {
	t.Parallel()
	l := randLogits(500, 7)
	p := Params{Temperature: 1.5, TopP: 1, RepeatPenalty: 1, Seed: 42}
	draw := func(p Params) []int32 {
		s := mustNew(t, p)
		out := make([]int32, 200)
		for i := range out {
			out[i] = s.Sample(l, nil)
		}
		return out
	}
	a, b := draw(p), draw(p)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs with the same seed: %d vs %d", i, a[i], b[i])
		}
	}
	p.Seed = 43
	c := draw(p)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("different seeds gave identical draws")
	}
}

func TestTopK1IsGreedy(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 10; seed++ {
		l := randLogits(300, seed)
		s := mustNew(t, Params{Temperature: 5, TopP: 1, TopK: 1, RepeatPenalty: 1, Seed: seed})
		for i := 0; i < 20; i++ {
			if got, want := s.Sample(l, nil), argmaxRef(l); got != want {
				t.Fatalf("seed %d: top-k 1 drew %d, argmax %d", seed, got, want)
			}
		}
	}
}

func TestTinyTopPIsArgmax(t *testing.T) {
	t.Parallel()
	for seed := uint64(0); seed < 10; seed++ {
		l := randLogits(3000, seed) // more than the first 256-candidate pass
		s := mustNew(t, Params{Temperature: 3, TopP: 1e-6, RepeatPenalty: 1, Seed: seed})
		for i := 0; i < 20; i++ {
			if got, want := s.Sample(l, nil), argmaxRef(l); got != want {
				t.Fatalf("seed %d: top-p tiny drew %d, argmax %d", seed, got, want)
			}
		}
	}
}

// TestTopPKeepsNucleus checks the kept set on a hand-computed example and
// on a flat distribution where the nucleus exceeds the first lazy-sort pass.
func TestTopPKeepsNucleus(t *testing.T) {
	t.Parallel()
	// Probabilities 0.5, 0.25, 0.125, 0.125: top-p 0.7 keeps ids 0 and 1.
	l := []float32{float32(math.Log(0.5)), float32(math.Log(0.25)), float32(math.Log(0.125)), float32(math.Log(0.125))}
	s := mustNew(t, Params{Temperature: 1, TopP: 0.7, RepeatPenalty: 1, Seed: 3})
	counts := map[int32]int{}
	for i := 0; i < 2000; i++ {
		counts[s.Sample(l, nil)]++
	}
	if counts[2]+counts[3] != 0 || counts[0] == 0 || counts[1] == 0 {
		t.Fatalf("top-p 0.7 counts %v, want only ids 0 and 1", counts)
	}

	flat := make([]float32, 2000)
	s = mustNew(t, Params{Temperature: 1, TopP: 0.5, RepeatPenalty: 1, Seed: 4})
	hi := 0
	for i := 0; i < 4000; i++ {
		id := s.Sample(flat, nil)
		if id >= 1000 {
			hi++
		}
	}
	// Ties sort by id, so the nucleus is ids 0..999.
	if hi != 0 {
		t.Fatalf("flat top-p 0.5 drew %d tokens outside the 1000-token nucleus", hi)
	}
}

func TestMinPFilters(t *testing.T) {
	t.Parallel()
	// Probabilities proportional to 1, 0.5, 0.2, 0.05.
	l := []float32{0, float32(math.Log(0.5)), float32(math.Log(0.2)), float32(math.Log(0.05))}
	tests := []struct {
		minP    float32
		allowed int32 // ids >= allowed must never appear
	}{
		{0.6, 1},
		{0.3, 2},
		{0.1, 3},
		{0.01, 4},
	}
	for _, tc := range tests {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			s := mustNew(t, Params{Temperature: 1, TopP: 1, MinP: tc.minP, RepeatPenalty: 1, Seed: 9})
			seen := map[int32]bool{}
			for i := 0; i < 3000; i++ {
				id := s.Sample(l, nil)
				if id >= tc.allowed {
					t.Fatalf("min-p %v drew id %d", tc.minP, id)
				}
				seen[id] = true
			}
			if len(seen) != int(tc.allowed) {
				t.Fatalf("min-p %v drew %d distinct ids, want %d", tc.minP, len(seen), tc.allowed)
			}
		})
	}
}

// TestDistribution samples many times at temperature 2 and compares the
// counts with softmax(l/2) by a chi-square statistic.
func TestDistribution(t *testing.T) {
	t.Parallel()
	l := []float32{1, 2, 0.5, -1, 3}
	const temp = 2.0
	const n = 50000
	s := mustNew(t, Params{Temperature: temp, TopP: 1, RepeatPenalty: 1, Seed: 123})
	counts := make([]int, len(l))
	for i := 0; i < n; i++ {
		counts[s.Sample(l, nil)]++
	}
	var z float64
	p := make([]float64, len(l))
	for i, v := range l {
		p[i] = math.Exp(float64(v) / temp)
		z += p[i]
	}
	var chi float64
	for i := range l {
		e := n * p[i] / z
		d := float64(counts[i]) - e
		chi += d * d / e
	}
	// 4 degrees of freedom: P(chi2 > 30) ~ 5e-6.
	if chi > 30 {
		t.Fatalf("chi-square %.1f too large; counts %v, expected %v", chi, counts, p)
	}
}

func TestRepetitionPenalty(t *testing.T) {
	t.Parallel()
	t.Run("semantics", func(t *testing.T) {
		t.Parallel()
		s := mustNew(t, Params{Temperature: 0, TopP: 1, RepeatPenalty: 2, RepeatLastN: 3})
		l := []float32{4, -1, 3, 2.5}
		got := s.penalised(l, []int32{0, 0, 1, 99, -3, 2})
		// Last 3 history entries are 99 (out of range), -3 (ignored) and 2.
		want := []float32{4, -1, 1.5, 2.5}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("penalised = %v, want %v", got, want)
			}
		}
		if l[2] != 3 {
			t.Fatal("Sample modified the caller's logits")
		}
		s2 := mustNew(t, Params{Temperature: 0, TopP: 1, RepeatPenalty: 2, RepeatLastN: -1})
		got = s2.penalised(l, []int32{0, 0, 1})
		want = []float32{2, -2, 3, 2.5} // applied once per distinct token
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("penalised = %v, want %v", got, want)
			}
		}
	})
	t.Run("changes greedy choice", func(t *testing.T) {
		t.Parallel()
		l := []float32{5, 4, 1}
		plain := mustNew(t, Greedy())
		if got := plain.Sample(l, []int32{0}); got != 0 {
			t.Fatalf("no penalty: got %d, want 0", got)
		}
		p := Greedy()
		p.RepeatPenalty, p.RepeatLastN = 1.5, 64
		pen := mustNew(t, p)
		if got := pen.Sample(l, []int32{0}); got != 1 {
			t.Fatalf("penalty 1.5: got %d, want 1", got)
		}
		p.RepeatLastN = 0
		off := mustNew(t, p)
		if got := off.Sample(l, []int32{0}); got != 0 {
			t.Fatalf("repeat_last_n 0: got %d, want 0", got)
		}
	})
}

func TestLogprobs(t *testing.T) {
	t.Parallel()
	l := []float32{1, 2, 3, float32(math.NaN())}
	lp := Logprobs(l)
	var sum float64
	for _, v := range lp[:3] {
		sum += math.Exp(float64(v))
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	if d := lp[2] - lp[1]; math.Abs(float64(d)-1) > 1e-6 {
		t.Fatalf("log-prob difference %v, want 1", d)
	}
	if !math.IsInf(float64(lp[3]), -1) {
		t.Fatalf("NaN logit got log-prob %v, want -Inf", lp[3])
	}
	// Large logits must not overflow.
	big := Logprobs([]float32{1e5, 1e5})
	if math.Abs(float64(big[0])+math.Ln2) > 1e-6 {
		t.Fatalf("log-prob of two equal huge logits = %v, want -ln 2", big[0])
	}

	top, err := TopLogprobs([]float32{0.5, 3, 3, -2, 1}, 3)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []int32{1, 2, 4}
	if len(top) != 3 {
		t.Fatalf("got %d entries, want 3", len(top))
	}
	for i, tl := range top {
		if tl.ID != wantIDs[i] {
			t.Fatalf("top ids %v, want %v", top, wantIDs)
		}
	}
	if all, _ := TopLogprobs([]float32{1, 2}, 10); len(all) != 2 {
		t.Fatalf("k above vocab returned %d entries", len(all))
	}
	if _, err := TopLogprobs([]float32{1}, -1); !errors.Is(err, ErrBadK) {
		t.Fatalf("negative k: err %v, want ErrBadK", err)
	}
}

func TestTopNMatchesSort(t *testing.T) {
	t.Parallel()
	l := randLogits(5000, 77)
	for _, n := range []int{1, 5, 100, 4999, 5000} {
		c := make([]cand, len(l))
		for i, v := range l {
			c[i] = cand{int32(i), v}
		}
		got := topN(c, n)
		prev := float32(math.Inf(1))
		for _, x := range got {
			if x.logit > prev {
				t.Fatalf("n=%d: not sorted", n)
			}
			prev = x.logit
		}
		// The n-th best logit from a plain count.
		cnt := 0
		for _, v := range l {
			if v > got[len(got)-1].logit {
				cnt++
			}
		}
		if cnt != n-1 {
			t.Fatalf("n=%d: %d logits beat the last kept one, want %d", n, cnt, n-1)
		}
	}
}

func BenchmarkSample(b *testing.B) {
	l := randLogits(128256, 5)
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"greedy", Greedy()},
		{"default", DefaultParams(1)},
		{"top_p_only", Params{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1, Seed: 1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(tc.p)
			if err != nil {
				b.Fatal(err)
			}
			hist := []int32{1, 2, 3, 4, 5}
			for b.Loop() {
				s.Sample(l, hist)
			}
		})
	}
}

// TestSampleDraftKeepsDistribution: whatever token is drafted, the tokens
// SampleDraft returns follow the sampler's own distribution (a chi-square
// test over 200000 seeded draws at the 0.1 % level, with top-k and top-p
// cutting the candidates), and it accepts the draft as often as the
// distribution gives it; a sampler that returned the draft whenever it was
// a candidate, or drew the rejection from the full distribution, fails.
func TestSampleDraftKeepsDistribution(t *testing.T) {
	t.Parallel()
	logits := []float32{1.5, 0.2, 2.0, -1, 0.7, 1.1, -3}
	for _, tc := range []struct {
		name  string
		p     Params
		draft int32
	}{
		{"likely draft", Params{Temperature: 0.8, TopP: 1, RepeatPenalty: 1, Seed: 1}, 2},
		{"unlikely draft", Params{Temperature: 1.3, TopP: 1, RepeatPenalty: 1, Seed: 2}, 3},
		{"draft outside top-k", Params{Temperature: 1, TopK: 4, TopP: 1, RepeatPenalty: 1, Seed: 3}, 6},
		{"top-p", Params{Temperature: 0.9, TopP: 0.8, RepeatPenalty: 1, Seed: 4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ref, err := New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			// The distribution: the frequencies of a long run of Sample
			// would do, but the exact one is cheaper: weights of the
			// candidates Sample draws among.
			c := append([]cand(nil), ref.candidates(append([]float32(nil), logits...))...)
			mx, _ := softmaxDenom(c)
			want := make([]float64, len(logits))
			var sum float64
			for _, x := range c {
				w := math.Exp(float64(x.logit-mx) / float64(tc.p.Temperature))
				want[x.id] = w
				sum += w
			}
			for i := range want {
				want[i] /= sum
			}
			s, _ := New(tc.p)
			const n = 200000
			got := make([]float64, len(logits))
			accepted := 0
			for range n {
				id, ok := s.SampleDraft(logits, nil, tc.draft)
				got[id]++
				if ok {
					if id != tc.draft {
						t.Fatalf("accepted %d, the draft was %d", id, tc.draft)
					}
					accepted++
				}
			}
			var chi2 float64
			df := -1
			for i := range got {
				if want[i] == 0 {
					if got[i] != 0 {
						t.Fatalf("token %d drawn %v times outside the candidates", i, got[i])
					}
					continue
				}
				e := want[i] * n
				chi2 += (got[i] - e) * (got[i] - e) / e
				df++
			}
			// 0.1 % critical values of chi-square for 1..6 degrees of freedom.
			crit := []float64{0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46}[df]
			if chi2 > crit {
				t.Fatalf("chi-square %.2f > %.2f (%d df): drawn %v, expected proportions %v", chi2, crit, df, got, want)
			}
			if a := float64(accepted) / n; math.Abs(a-want[tc.draft]) > 0.01 {
				t.Fatalf("accepted %.4f of drafts, p(draft) = %.4f", a, want[tc.draft])
			}
		})
	}
	g, _ := New(Greedy())
	if id, ok := g.SampleDraft(logits, nil, 2); id != 2 || !ok {
		t.Fatalf("greedy: %d, %v", id, ok)
	}
	if id, ok := g.SampleDraft(logits, nil, 0); id != 2 || ok {
		t.Fatalf("greedy, wrong draft: %d, %v", id, ok)
	}
}

// TestMaskedNeverChosen: a logit of -Inf is how a grammar forbids a
// token, so no setting may ever pick one while an allowed token remains,
// including when the forbidden tokens hold the largest raw logits, when
// the repetition penalty touches them, and when a drafter proposes one.
func TestMaskedNeverChosen(t *testing.T) {
	t.Parallel()
	inf := float32(math.Inf(-1))
	for _, p := range []Params{
		Greedy(),
		DefaultParams(1),
		{Temperature: 1, TopP: 1, RepeatPenalty: 1, Seed: 2},
		{Temperature: 2, TopP: 0.5, TopK: 3, MinP: 0.2, RepeatPenalty: 1.3, RepeatLastN: -1, Seed: 3},
		{Temperature: 0.01, TopP: 1, MinP: 0.9, RepeatPenalty: 0.5, RepeatLastN: 8, Seed: 4},
	} {
		s := mustNew(t, p)
		for trial := range 200 {
			l := randLogits(1000, uint64(trial))
			allowed := map[int32]bool{}
			for i := range l {
				// Keep a few tokens, and forbid the best ones.
				if i%97 == trial%97 && l[i] < 2 {
					allowed[int32(i)] = true
				} else {
					l[i] = inf
				}
			}
			if len(allowed) == 0 {
				continue
			}
			history := []int32{0, 1, 2, int32(trial % 1000)}
			if id := s.Sample(l, history); !allowed[id] {
				t.Fatalf("%+v: Sample chose forbidden token %d", p, id)
			}
			if id, ok := s.SampleDraft(l, history, int32((trial+1)%97)); !allowed[id] || (ok && !allowed[int32((trial+1)%97)]) {
				t.Fatalf("%+v: SampleDraft returned forbidden token %d (accepted %v)", p, id, ok)
			}
		}
	}
}
