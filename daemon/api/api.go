// Package api is the wire format of stratad's admin API (load, unload,
// status) — the part that is not OpenAI's. Like package openai it imports
// nothing heavy, so the strata client shares these types with the daemon
// instead of redeclaring them.
//
// Paths (all JSON):
//
//	GET  /strata/v1/status          any peer   Status
//	POST /strata/v1/models/load     admin      LoadRequest → ModelStatus
//	POST /strata/v1/models/unload   admin      UnloadRequest → UnloadResponse
//	GET  /metrics                   any peer   Prometheus text format
//	GET  /health                    any peer   Health
package api

import "time"

// Paths of the admin API.
const (
	PathStatus = "/strata/v1/status"
	PathLoad   = "/strata/v1/models/load"
	PathUnload = "/strata/v1/models/unload"
	PathHealth = "/health"
	PathMetric = "/metrics"
)

// Budgets bound the memory a model may take per tier. Zero means no limit.
type Budgets struct {
	// VRAMBytes is the device-memory budget (tier A + streaming slots).
	VRAMBytes int64 `json:"vram_bytes"`
	// RAMBytes is the pinned-host budget (tier B + staging).
	RAMBytes int64 `json:"ram_bytes"`
}

// LoadRequest asks the daemon to load a model.
type LoadRequest struct {
	// Path is the model file, relative to a configured model directory or
	// absolute inside one.
	Path string `json:"path"`
	// Name is the id clients use in "model"; default: the file name
	// without its extension.
	Name string `json:"name,omitempty"`
	// Budgets bound the model's memory; see Budgets.
	Budgets Budgets `json:"budgets"`
	// MaxBatch and MaxQueue override the daemon's scheduler defaults.
	MaxBatch int `json:"max_batch,omitempty"`
	MaxQueue int `json:"max_queue,omitempty"`
}

// UnloadRequest asks the daemon to unload a model. Requests in flight on
// it end with an error.
type UnloadRequest struct {
	Name string `json:"name"`
}

// UnloadResponse confirms an unload.
type UnloadResponse struct {
	Name     string `json:"name"`
	Unloaded bool   `json:"unloaded"`
	// Cancelled is the number of requests that were in flight or queued.
	Cancelled int `json:"cancelled"`
}

// TierPlan is where each layer of a model lives and what each tier holds.
// It is filled in by the tiered engine (engine/tier); until that is
// integrated the daemon reports no plan (nil) and says so in PlanNote.
type TierPlan struct {
	// Layers maps layer index to tier "A", "B" or "C".
	Layers []string `json:"layers"`
	// Tiers summarises each tier.
	Tiers []TierStatus `json:"tiers"`
}

// TierStatus is one tier's share of a model.
type TierStatus struct {
	Tier        string `json:"tier"` // "A", "B" or "C"
	Layers      int    `json:"layers"`
	Bytes       int64  `json:"bytes"`
	BytesMoved  uint64 `json:"bytes_moved"`
	Description string `json:"description,omitempty"`
}

// Memory is what a loaded model holds in memory now.
type Memory struct {
	// WeightBytes is the size of the weights (the mapped model file).
	WeightBytes int64 `json:"weight_bytes"`
	// KVBytes is the KV cache currently held by active sequences.
	KVBytes int64 `json:"kv_bytes"`
	// Location says where the weights are ("host-mmap" on the CPU engine).
	Location string `json:"location"`
}

// Queue is the scheduler state of a model.
type Queue struct {
	Waiting  int `json:"waiting"`
	Active   int `json:"active"`
	MaxBatch int `json:"max_batch"`
	MaxQueue int `json:"max_queue"`
}

// Counters are cumulative counts for a model since it was loaded.
type Counters struct {
	Passes           uint64 `json:"passes"`
	PromptTokens     uint64 `json:"prompt_tokens"`
	CompletionTokens uint64 `json:"completion_tokens"`
	Finished         uint64 `json:"finished"`
	Cancelled        uint64 `json:"cancelled"`
	Failed           uint64 `json:"failed"`
}

// ModelStatus describes one loaded model.
type ModelStatus struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Arch     string    `json:"arch"`
	Layers   int       `json:"layers"`
	Context  int       `json:"context"`
	Vocab    int       `json:"vocab"`
	Backend  string    `json:"backend"` // "cpu" until the CUDA backend lands
	LoadedAt time.Time `json:"loaded_at"`
	Budgets  Budgets   `json:"budgets"`
	// Plan is the tier plan; nil until engine/tier is integrated.
	Plan *TierPlan `json:"plan"`
	// PlanNote explains a missing plan.
	PlanNote string `json:"plan_note,omitempty"`
	Memory   Memory `json:"memory"`
	// Pipeline holds the streaming pipeline's counters; nil until
	// engine/stream is integrated.
	Pipeline map[string]uint64 `json:"pipeline"`
	Queue    Queue             `json:"queue"`
	Counters Counters          `json:"counters"`
}

// Status is the response of GET /strata/v1/status.
type Status struct {
	Version   string        `json:"version"`
	PID       int           `json:"pid"`
	StartedAt time.Time     `json:"started_at"`
	Uptime    float64       `json:"uptime_seconds"`
	Models    []ModelStatus `json:"models"`
	Limits    Limits        `json:"limits"`
	// Peer describes the caller as the daemon sees it, and whether it may
	// use the admin API.
	Peer  string `json:"peer"`
	Admin bool   `json:"admin"`
}

// Limits are the daemon's request limits.
type Limits struct {
	MaxBodyBytes    int64 `json:"max_body_bytes"`
	MaxPromptTokens int   `json:"max_prompt_tokens"`
	MaxTokens       int   `json:"max_tokens"`
	MaxQueue        int   `json:"max_queue"`
	MaxBatch        int   `json:"max_batch"`
}

// Health is the response of GET /health.
type Health struct {
	Status string `json:"status"` // "ok"
	Models int    `json:"models"`
}
