package bench

import (
	"fmt"
	"strings"
)

// ColdStartGoal is the largest acceptable ColdStartResult.Ratio: a cold
// load may cost a fifth more than reading the pool once at the speed the
// storage was measured at.
const ColdStartGoal = 1.2

// ColdStartResult is how long a model took from its load request to its
// first token, against how long reading its pool once at the measured
// storage rate takes: the load copies the resident extents in and the
// first pass reads the streamed ones, so every byte is read about once,
// and whatever the ratio holds above 1 is overhead (verification, plan,
// allocation, the first pass's compute).
type ColdStartResult struct {
	// Model is what was loaded (a file or nvme://BDF/NSID/NAME), Name the
	// name it was loaded under, Route its tier-C route ("" when resident).
	Model string `json:"model"`
	Name  string `json:"name"`
	Route string `json:"route,omitempty"`
	// PoolBytes is the model's size.
	PoolBytes int64 `json:"pool_bytes"`
	// LoadSeconds is the load request's time; FirstTokenSeconds the time
	// from the load request to the first token of a one-token completion.
	LoadSeconds       float64 `json:"load_seconds"`
	FirstTokenSeconds float64 `json:"first_token_seconds"`
	// StorageBps is the storage rate the daemon measured for the plan
	// (bytes/s), and StorageNote how; 0 when it planned without measuring.
	StorageBps  float64 `json:"storage_bytes_per_second,omitempty"`
	StorageNote string  `json:"storage_note,omitempty"`
	// IdealSeconds is PoolBytes / StorageBps; Ratio FirstTokenSeconds /
	// IdealSeconds (0 when there is no measured rate), Goal ColdStartGoal.
	IdealSeconds float64 `json:"ideal_seconds,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	Goal         float64 `json:"goal"`
	// Note says why there is no ratio.
	Note string `json:"note,omitempty"`
}

// SetStorage takes the plan's storage rate and its link notes and fills
// StorageBps, StorageNote, IdealSeconds, Ratio and Goal, or Note when the
// rate was not measured (pinned links, or a resident plan that measured
// nothing).
func (r *ColdStartResult) SetStorage(bps float64, notes []string) {
	r.Goal = ColdStartGoal
	for _, n := range notes {
		if strings.HasPrefix(n, "storage: ") && strings.Contains(n, " of ") {
			r.StorageNote = n
		}
	}
	if r.StorageNote == "" || bps <= 0 {
		r.Note = "the daemon planned this load without measuring its storage (pinned link speeds, or a model that fits resident): give a budget that streams layers"
		return
	}
	r.StorageBps = bps
	r.IdealSeconds = float64(r.PoolBytes) / bps
	if r.IdealSeconds > 0 {
		r.Ratio = r.FirstTokenSeconds / r.IdealSeconds
	}
}

// String is the result as `strata bench coldstart` prints it.
func (r *ColdStartResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cold start of %s (%.1f MB", r.Model, float64(r.PoolBytes)/1e6)
	if r.Route != "" {
		fmt.Fprintf(&b, ", tier C via %s", r.Route)
	}
	fmt.Fprintf(&b, ")\n  load %.3fs, first token %.3fs after the load request\n", r.LoadSeconds, r.FirstTokenSeconds)
	if r.Ratio == 0 {
		fmt.Fprintf(&b, "  no ratio: %s\n", r.Note)
		return b.String()
	}
	verdict := "meets"
	if r.Ratio > r.Goal {
		verdict = "misses"
	}
	fmt.Fprintf(&b, "  reading the pool once at the measured %.3g GB/s takes %.3fs (%s)\n", r.StorageBps/1e9, r.IdealSeconds, r.StorageNote)
	fmt.Fprintf(&b, "  ratio %.2f: %s the goal of %.1f\n", r.Ratio, verdict, r.Goal)
	return b.String()
}
