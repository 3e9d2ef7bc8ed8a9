package grammar

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestIntRange checks the digit patterns exactly: every integer around
// and inside random ranges is accepted iff it lies in the range.
func TestIntRange(t *testing.T) {
	t.Parallel()
	v := byteVocab(t)
	r := rand.New(rand.NewPCG(5, 6))
	type span struct{ lo, hi int64 }
	spans := []span{{0, 0}, {-5, 5}, {1, 9}, {10, 99}, {0, 100}, {-100, -1}, {7, 1234}, {-999, 1000}, {95, 105},
		{-maxMagnitude, maxMagnitude}, {123456789, 123457000}, {-20, -20}}
	for range 40 {
		a, b := r.Int64N(4000)-2000, r.Int64N(4000)-2000
		spans = append(spans, span{min(a, b), max(a, b)})
	}
	for _, s := range spans {
		g, err := Parse("root ::= " + intRange(s.lo, s.hi))
		if err != nil {
			t.Fatalf("[%d, %d]: %v", s.lo, s.hi, err)
		}
		m, err := NewMatcher(g, v)
		if err != nil {
			t.Fatal(err)
		}
		check := func(x int64) {
			want := x >= s.lo && x <= s.hi
			if got := matchText(t, m, strconv.FormatInt(x, 10)); got != want {
				t.Fatalf("[%d, %d]: %d accepted = %v", s.lo, s.hi, x, got)
			}
		}
		for _, edge := range []int64{s.lo, s.hi} {
			for d := int64(-30); d <= 30; d++ {
				check(edge + d)
			}
		}
		for range 200 {
			check(s.lo + r.Int64N(s.hi-s.lo+1))
		}
		for _, bad := range []string{"-0", "00", "01", "+1", ""} {
			if matchText(t, m, bad) {
				t.Fatalf("[%d, %d]: %q accepted", s.lo, s.hi, bad)
			}
		}
	}
	if intRange(3, 2) != "" {
		t.Fatal("an empty range has a grammar")
	}
}
