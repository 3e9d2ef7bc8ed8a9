package enginebench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParsePeers(t *testing.T) {
	t.Parallel()
	const fig = `{"system": "llama.cpp", "setup": "8b, tg128", "value": 261.4, "unit": "tok/s"}`
	for _, c := range []struct {
		name, in string
		err      string // "" for a good file
		figures  int
	}{
		{name: "one figure", in: `{"source": "llama.cpp 3f545be, llama-bench", "figures": {"resident_decode": ` + fig + `}}`, figures: 1},
		{name: "every figure", in: `{"source": "s", "figures": {"resident_decode": ` + fig + `, "resident_prefill": ` + fig +
			`, "half_decode": ` + fig + `, "half_prefill": ` + fig + `, "70b_half_decode": ` + fig + `, "bf16_budget_decode": ` + fig + `}}`, figures: 6},
		{name: "empty file", in: ``, err: "not a peers file"},
		{name: "not JSON", in: `resident_decode = 261.4`, err: "not a peers file"},
		{name: "an array", in: `[1, 2]`, err: "not a peers file"},
		{name: "two values", in: `{"source": "s", "figures": {"half_decode": ` + fig + `}} {}`, err: "more than one JSON value"},
		{name: "unknown field", in: `{"source": "s", "peers": {}}`, err: `unknown field "peers"`},
		{name: "no source", in: `{"figures": {"half_decode": ` + fig + `}}`, err: `no "source"`},
		{name: "blank source", in: `{"source": "  ", "figures": {"half_decode": ` + fig + `}}`, err: `no "source"`},
		{name: "no figures", in: `{"source": "s"}`, err: `no "figures"`},
		{name: "unknown name", in: `{"source": "s", "figures": {"resident_decod": ` + fig + `}}`, err: `figure "resident_decod": unknown name`},
		{name: "no system", in: `{"source": "s", "figures": {"half_decode": {"value": 1, "unit": "tok/s"}}}`, err: `figure "half_decode": no system`},
		{name: "no unit", in: `{"source": "s", "figures": {"half_decode": {"system": "x", "value": 1}}}`, err: `figure "half_decode": no unit`},
		{name: "no value", in: `{"source": "s", "figures": {"half_decode": {"system": "x", "unit": "tok/s"}}}`, err: "value 0, want a positive number"},
		{name: "negative value", in: `{"source": "s", "figures": {"half_decode": {"system": "x", "unit": "tok/s", "value": -3}}}`, err: "value -3"},
		{name: "value a string", in: `{"source": "s", "figures": {"half_decode": {"system": "x", "unit": "tok/s", "value": "26.3"}}}`, err: "not a peers file"},
		{name: "unknown figure field", in: `{"source": "s", "figures": {"half_decode": {"system": "x", "unit": "tok/s", "value": 1, "ratio": 2}}}`, err: `unknown field "ratio"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParsePeers(strings.NewReader(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("ParsePeers = %+v, %v; want an error with %q", p, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Figures) != c.figures {
				t.Fatalf("%d figures, want %d", len(p.Figures), c.figures)
			}
			if f, ok := p.Figure(PeerResidentDecode); !ok || f.Value != 261.4 || f.System != "llama.cpp" {
				t.Errorf("resident_decode %+v, %v", f, ok)
			}
		})
	}
}

// TestLoadPeers: a missing file and a bad one name the path; the peers
// file the repository ships parses and holds every figure but the moe
// scenario's, which llama.cpp --n-cpu-moe has not been measured for yet
// (TestMoECases).
func TestLoadPeers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.json")
	if _, err := LoadPeers(missing); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"source": ""}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPeers(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `no "source"`) {
		t.Errorf("bad file: %v", err)
	}
	p, err := LoadPeers(filepath.Join("..", "..", "..", "docs", "peers-h200.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range peerNames {
		if _, ok := p.Figure(n); !ok && !slices.Contains(moePeerNames(), n) {
			t.Errorf("docs/peers-h200.json has no %q", n)
		}
	}
	if !strings.Contains(p.Source, "llama.cpp") {
		t.Errorf("source %q does not name llama.cpp", p.Source)
	}
}

// TestWriteTextNoPeers: a run given no peers prints no peer ratio and no
// goal against a peer, and says so once.
func TestWriteTextNoPeers(t *testing.T) {
	t.Parallel()
	h2d := ratioTo(54.3, 55.4, "pinned H2D peak 55.4 GB/s")
	dec := ratioToPeer(186.9, nil, PeerResidentDecode)
	r := &Report{Device: "GPU", Scenarios: []ScenarioResult{{Scenario: Resident, Title: "t", Metrics: []Metric{
		{Key: "decode_tps_graph", Label: "decode, CUDA graph", Value: 186.9, Unit: "tok/s", Ratio: dec, Goal: atLeast(dec, 1.2)},
		{Key: "h2d_gbps", Label: "H2D during decode", Value: 54.3, Unit: "GB/s", Ratio: h2d, Goal: atLeast(h2d, 0.95)},
	}}}}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "no peer figures given (--peers FILE)") || strings.Contains(out, "*") || strings.Contains(out, "llama.cpp") {
		t.Errorf("peers in a run without them:\n%s", out)
	}
	if met, total := r.Goals(); met != 1 || total != 1 {
		t.Errorf("goals %d of %d, want the measured one alone", met, total)
	}
}
