package moebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/tier"
)

// TestRun measures a tiny synthetic Qwen3-MoE resident and with half of
// its experts' bytes: the points say what was resident, what was read per
// token against what the routed experts hold, and print as a table.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	links := tier.DefaultLinks()
	o := Options{Dir: dir, Type: "q8_0", Batches: []int{1, 2}, Tokens: 4, Zipf: 1, Links: &links}
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Points) != 2 || r.Points[0].Resident != r.Points[0].Experts || r.Points[0].ReadPerToken != 0 {
		t.Fatalf("resident points %+v", r.Points)
	}
	// Three quarters of the experts' bytes beside the layers (the read
	// buffers take half): some read per token.
	e, err := engine.OpenWith(context.Background(), r.Model, engine.Options{Backend: engine.BackendCPU, HostBudget: 1 << 30, Context: 6, Batch: 2, Links: &links})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := e.Experts()
	layers := e.Plan().Device.Total + e.Plan().Host.Total
	e.Close()
	o.Budgets, o.Rounds = []int64{layers + x.ResidentBytes*3/4}, 2
	r, err = Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// Each batch reads ahead, then again without, then without and with
	// (a read ahead of the warm-up pass can serve a timed one, so only the
	// rows without reads ahead must read in their window); a batch whose
	// first row read nothing ahead has no other.
	lazy := 0
	rows := map[int][]Point{}
	for _, p := range r.Points {
		rows[p.Batch] = append(rows[p.Batch], p)
		if p.Resident == 0 || p.Resident == p.Experts || p.ReadPerToken > p.RoutedPerToken*4 ||
			p.Hit <= 0 || p.Hit >= 1 || p.TokensPerSecond <= 0 || p.LimitPerToken <= 0 ||
			p.Ahead && (p.ReadsAheadPerToken < 0 || p.AheadUsed < 0 || p.AheadUsed > 1) ||
			!p.Ahead && (p.ReadPerToken <= 0 || p.ReadsAheadPerToken != 0 || p.AheadServed != 0) {
			t.Fatalf("point %+v", p)
		}
		if !p.Ahead {
			lazy++
		}
	}
	for batch, ps := range rows {
		var order []string
		for _, p := range ps {
			order = append(order, fmt.Sprint(p.Round, p.Ahead))
		}
		got := strings.Join(order, ",")
		if got != "1 true,1 false,2 false,2 true" && (got != "1 true" || ps[0].ReadsAheadPerToken != 0) {
			t.Fatalf("batch %d: rounds and reads ahead %s", batch, got)
		}
	}
	if lazy == 0 {
		t.Fatal("no batch compared reads ahead with none")
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil || !strings.Contains(b.String(), "Zipf law of exponent 1") || strings.Count(b.String(), "\n") != 5+len(r.Points) {
		t.Fatalf("text %v:\n%s", err, b.String())
	}
	t.Logf("\n%s", b.String())

	for _, bad := range []Options{{Tokens: -1}, {Batches: []int{0}}, {Budgets: []int64{-1}}, {Zipf: -1}, {Rounds: -1}} {
		bad.Dir, bad.Links = dir, &links
		if _, err := Run(context.Background(), bad); !errors.Is(err, ErrBadOptions) {
			t.Fatalf("options %+v: %v", bad, err)
		}
	}
}
