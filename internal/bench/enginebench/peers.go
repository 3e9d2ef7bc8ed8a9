package enginebench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// Peer is a figure another system reached on the same kind of machine: a
// reference read from a peers file (LoadPeers), never measured by this
// package. Reports print it marked as such next to the ratio it anchors.
type Peer struct {
	// System and Setup say what ran and how ("llama.cpp", "all 32 layers
	// on the GPU").
	System string `json:"system"`
	Setup  string `json:"setup"`
	// Value is the figure, in Unit.
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// The figures a peers file may hold, by the name it gives them: the
// scenarios' reference rates on the synthetic Llama-3.1 shapes `strata
// model synth` writes.
const (
	// PeerResidentDecode and PeerResidentPrefill: the 8b in Q4_K_M with
	// every layer on the GPU, decode and a 512-token prefill.
	PeerResidentDecode  = "resident_decode"
	PeerResidentPrefill = "resident_prefill"
	// PeerHalfDecode and PeerHalfPrefill: the same model with half its
	// layers off the GPU.
	PeerHalfDecode  = "half_decode"
	PeerHalfPrefill = "half_prefill"
	// Peer70BHalfDecode: the 70b in Q4_K_M with half its layers off the
	// GPU.
	Peer70BHalfDecode = "70b_half_decode"
	// PeerBF16Budget: a bf16 8b decoding within the bf16 scenario's
	// device budget.
	PeerBF16Budget = "bf16_budget_decode"
)

// peerNames are the names a peers file may use: the Peer* constants and
// each MoECase's llama.cpp --n-cpu-moe decode at batch 1 (MoECase.peerName,
// "moe_qwen3moe_30b_a3b_8gib_decode"), which the moe scenario relates
// its model's own routing to (goal 1.5x on the engine's default way), and
// its decode of DefaultMoEServed tokens, which the served row relates to
// (goal 1.5x).
var peerNames = append([]string{PeerResidentDecode, PeerResidentPrefill, PeerHalfDecode, PeerHalfPrefill, Peer70BHalfDecode, PeerBF16Budget}, moePeerNames()...)

// Peers are the reference figures a run relates its own to. Without them
// a run prints no peer ratio and judges no goal set against a peer.
type Peers struct {
	// Source says where the figures come from (systems, versions,
	// commands, machine); reports print it once.
	Source string `json:"source"`
	// Figures by name (the Peer* constants); a file may leave some out.
	Figures map[string]Peer `json:"figures"`
}

// Figure returns the named figure, if the peers hold it (p may be nil).
func (p *Peers) Figure(name string) (Peer, bool) {
	if p == nil {
		return Peer{}, false
	}
	f, ok := p.Figures[name]
	return f, ok
}

// LoadPeers reads a peers file: a JSON object with a "source" string and
// "figures", each a name (the Peer* constants) mapped to its system,
// setup, value and unit. Unknown fields or names, a missing source, and
// figures without a system, a unit or a positive finite value are errors.
func LoadPeers(path string) (*Peers, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	p, err := ParsePeers(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("peers %s: %w", path, err)
	}
	return p, nil
}

// ParsePeers is LoadPeers on an open file.
func ParsePeers(r io.Reader) (*Peers, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var p Peers
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a peers file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a peers file: more than one JSON value")
	}
	if strings.TrimSpace(p.Source) == "" {
		return nil, errors.New(`no "source": say where the figures come from`)
	}
	if len(p.Figures) == 0 {
		return nil, errors.New(`no "figures"`)
	}
	names := make([]string, 0, len(p.Figures))
	for n := range p.Figures {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := p.Figures[n]
		switch {
		case !slices.Contains(peerNames, n):
			return nil, fmt.Errorf("figure %q: unknown name (want some of %s)", n, strings.Join(peerNames, ", "))
		case strings.TrimSpace(f.System) == "":
			return nil, fmt.Errorf("figure %q: no system", n)
		case strings.TrimSpace(f.Unit) == "":
			return nil, fmt.Errorf("figure %q: no unit", n)
		case !(f.Value > 0) || math.IsInf(f.Value, 0):
			return nil, fmt.Errorf("figure %q: value %v, want a positive number", n, f.Value)
		}
	}
	return &p, nil
}
