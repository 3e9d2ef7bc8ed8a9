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

// Budgets bound the memory a model may take per tier; the tier planner
// places layers within them, streaming what does not fit. Zero means the
// hardware default: for RAMBytes, MemAvailable minus a reserve; for
// VRAMBytes on the GPU, its free memory less a reserve; for VRAMBytes on
// the CPU backend, "device memory is host memory" (RAMBytes then bounds
// tier A and the slots together).
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
	// Context is the per-sequence context the KV cache is planned for;
	// 0 means the model's, at most 4096.
	Context int `json:"context,omitempty"`
	// Depth fixes the streaming pipeline's depth; 0 lets the planner
	// choose.
	Depth int `json:"depth,omitempty"`
	// Tiers forces a placement instead of planning one ("all-C", "mixed",
	// "A,C,B,…"), for tests and benchmarks; empty means plan.
	Tiers string `json:"tiers,omitempty"`
	// Backend picks where the model runs: "auto" (the GPU when CUDA is
	// usable, else the CPU), "cpu" or "cuda" (fails when no GPU is
	// usable). Empty means the daemon's default (stratad --backend).
	Backend string `json:"backend,omitempty"`
	// Draft names a draft model (a file under a model directory, with the
	// model's vocabulary, run on the CPU) whose guesses each decode pass
	// verifies: speculative decoding, output unchanged. Lookup drafts by
	// prompt lookup instead when no Draft is given. Requests opt out with
	// "speculative": false.
	Draft  string `json:"draft,omitempty"`
	Lookup bool   `json:"lookup,omitempty"`
	// SelfDraft, when neither Draft nor Lookup is set, drafts with the
	// model's own first SelfDraft layers and its output head (on the GPU
	// when those are resident there, else on the CPU).
	SelfDraft int `json:"self_draft,omitempty"`
	// SkipLayers leaves layers out of every pass (CPU backend): "auto",
	// a count of the layers that change the hidden state least, or a list
	// "4,9". It costs quality; `strata bench quality` measures how much.
	SkipLayers string `json:"skip_layers,omitempty"`
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

// TierPlan is where each layer of a model lives, what each tier holds and
// what the planner expects a pass to cost (engine/tier's Plan, flattened
// for clients that do not link the engine).
type TierPlan struct {
	// Layers maps layer index to tier "A", "B" or "C".
	Layers []string `json:"layers"`
	// LayerBytes is each layer's size (its pool extent), by index.
	LayerBytes []int64 `json:"layer_bytes"`
	// Tiers summarises each tier, A, B and C in that order.
	Tiers []TierStatus `json:"tiers"`
	// Depth is the streaming pipeline's depth (slots); 0 when every
	// layer is resident.
	Depth int `json:"depth"`
	// SlotBytes is one device slot (the largest streamed layer).
	SlotBytes int64 `json:"slot_bytes"`
	// Batch is the batch size the plan was made for.
	Batch int `json:"batch"`
	// Bound is the link expected to bound a pass: "storage", "h2d" or
	// "compute".
	Bound string `json:"bound"`
	// PassSeconds is the expected time of one pass (one token for every
	// sequence of the batch); TokensPerSecond is Batch per PassSeconds.
	PassSeconds     float64 `json:"pass_seconds"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	// StallSeconds is the part of PassSeconds the depth does not hide.
	StallSeconds float64 `json:"stall_seconds"`
	// LinkSeconds is each link's expected busy time per pass.
	LinkSeconds Links `json:"link_seconds"`
	// LinkBPS are the link speeds planned with (bytes/s), and LinkNotes
	// where they came from.
	LinkBPS   Links    `json:"link_bps"`
	LinkNotes []string `json:"link_notes,omitempty"`
	// DeviceBytes and HostBytes are what the plan uses of each budget;
	// Shared says device memory is host memory (the CPU backend).
	DeviceBytes       int64 `json:"device_bytes"`
	DeviceBudgetBytes int64 `json:"device_budget_bytes"`
	HostBytes         int64 `json:"host_bytes"`
	HostBudgetBytes   int64 `json:"host_budget_bytes"`
	Shared            bool  `json:"shared"`
}

// Links holds one number per pipeline link.
type Links struct {
	Storage      float64 `json:"storage"`
	HostToDevice float64 `json:"h2d"`
	Compute      float64 `json:"compute"`
}

// TierStatus is one tier's share of a model.
type TierStatus struct {
	Tier   string `json:"tier"` // "A", "B" or "C"
	Layers int    `json:"layers"`
	Bytes  int64  `json:"bytes"`
	// BytesMoved is what streaming this tier's layers has moved since the
	// model was loaded (0 for tier A: resident, nothing moves).
	BytesMoved  uint64 `json:"bytes_moved"`
	Description string `json:"description,omitempty"`
}

// PipelineStatus is the streaming pipeline's instrumentation summed over
// every pass since the model was loaded (engine/stream's Stats).
type PipelineStatus struct {
	Passes int64 `json:"passes"`
	Failed int64 `json:"failed"`
	// WallSeconds is the passes' total duration.
	WallSeconds float64 `json:"wall_seconds"`
	// Read is stage 1 (storage → staging, tier C, checksums included),
	// Copy stage 2 (staging or host → device slot, tiers B and C),
	// Compute stage 3.
	Read    StageStatus `json:"read"`
	Copy    StageStatus `json:"copy"`
	Compute StageStatus `json:"compute"`
	// VerifySeconds is the part of Read spent on checksums.
	VerifySeconds float64 `json:"verify_seconds"`
	// Overlap is how much the stages ran at once: 1 = a pass took only
	// as long as its slowest stage, 0 = the stages ran one after another.
	Overlap float64 `json:"overlap"`
	// ComputeUtil is the share of pass time compute was fed.
	ComputeUtil float64 `json:"compute_util"`
	// ResidentBytes is the tier-A bytes held; StreamedBytes the bytes
	// moved into device slots.
	ResidentBytes int64 `json:"resident_bytes"`
	StreamedBytes int64 `json:"streamed_bytes"`
}

// StageStatus is one pipeline stage's counters.
type StageStatus struct {
	Layers       int64   `json:"layers"`
	Bytes        int64   `json:"bytes"`
	BusySeconds  float64 `json:"busy_seconds"`
	StallSeconds float64 `json:"stall_seconds"`
	// GBps is Bytes per busy second, in 10^9 bytes/s: the bandwidth the
	// stage's link achieved while moving data.
	GBps float64 `json:"gbps"`
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
	// Speculative decoding: guesses drafted and accepted, and the passes
	// that verified guesses.
	Drafted      uint64 `json:"drafted,omitempty"`
	Accepted     uint64 `json:"accepted,omitempty"`
	VerifyPasses uint64 `json:"verify_passes,omitempty"`
}

// ModelStatus describes one loaded model.
type ModelStatus struct {
	Name string `json:"name"`
	// Path is the model file; shown to administrators only.
	Path   string `json:"path,omitempty"`
	Arch   string `json:"arch"`
	Layers int    `json:"layers"`
	// Skipped are the layers every pass leaves out (layer skip).
	Skipped []int `json:"skipped_layers,omitempty"`
	Context int   `json:"context"`
	Vocab   int   `json:"vocab"`
	// Backend is where the model runs, "cpu" or "cuda"; BackendInfo says
	// on what device, or why the CPU runs it.
	Backend     string        `json:"backend"`
	BackendInfo BackendStatus `json:"backend_info"`
	LoadedAt    time.Time     `json:"loaded_at"`
	Budgets     Budgets       `json:"budgets"`
	// Plan is the tier plan the model runs.
	Plan *TierPlan `json:"plan"`
	// PlanNote says what the plan means for this model (everything
	// resident, or which layers stream).
	PlanNote string `json:"plan_note,omitempty"`
	Memory   Memory `json:"memory"`
	// Pipeline holds the streaming pipeline's counters; nil when every
	// layer is resident (nothing streams).
	Pipeline *PipelineStatus `json:"pipeline"`
	// Experts is a mixture-of-experts model's expert placement and how
	// expert uses were served (absent for a dense model).
	Experts *ExpertStatus `json:"experts,omitempty"`
	// TierCRoute says how the tier-C layers are read and why the other
	// routes were not taken; nil when no layer is on tier C.
	TierCRoute *TierCRoute `json:"tier_c_route,omitempty"`
	Queue      Queue       `json:"queue"`
	Counters   Counters    `json:"counters"`
}

// ExpertStatus is where a mixture-of-experts model's experts are and how
// its expert uses were served since it loaded.
type ExpertStatus struct {
	Experts       int   `json:"experts"`
	Resident      int   `json:"resident"`
	ResidentBytes int64 `json:"resident_bytes"`
	StorageBytes  int64 `json:"storage_bytes"`
	ReadBuffers   int   `json:"read_buffers"`
	// Uses served by resident experts, by a read buffer that still held
	// the expert, by a read started ahead of the layer (its prediction
	// right), and by a read from storage when the layer asked; HitRate is
	// the share that read nothing. ReadBytes counts every read: on
	// demand, ahead and to promote; ReadsAhead the reads started ahead,
	// used or not; PromoteReads the reads made to promote experts
	// (Promoted counts those installed).
	UsesResident   uint64  `json:"uses_resident"`
	UsesBuffered   uint64  `json:"uses_buffered"`
	UsesPrefetched uint64  `json:"uses_prefetched"`
	UsesRead       uint64  `json:"uses_read"`
	HitRate        float64 `json:"hit_rate"`
	ReadBytes      int64   `json:"read_bytes"`
	ReadsAhead     uint64  `json:"reads_ahead"`
	PromoteReads   uint64  `json:"promote_reads"`
	ReadsFailed    uint64  `json:"reads_failed"`
	Promoted       uint64  `json:"promoted"`
	Demoted        uint64  `json:"demoted"`
	// On a GPU: experts also held in device memory and computed there,
	// their bytes, the layers whose every expert is there (they need no
	// host), the (token, expert) picks the GPU and the CPU computed, and
	// the GPU's share of them; the experts moved into device memory while
	// serving, by the routing served.
	OnDevice          int     `json:"on_device,omitempty"`
	DeviceBytes       int64   `json:"device_bytes,omitempty"`
	DeviceWholeLayers int     `json:"device_whole_layers,omitempty"`
	UsesDevice        uint64  `json:"uses_device,omitempty"`
	UsesCPU           uint64  `json:"uses_cpu,omitempty"`
	DeviceHitRate     float64 `json:"device_hit_rate,omitempty"`
	DeviceMoves       uint64  `json:"device_moves,omitempty"`
	// StreamedPicks counts the picks of experts off the device that were
	// sent over PCIe and computed on the GPU beside the CPU, MappedPicks
	// those the GPU pulled over PCIe itself with no CPU in the layer
	// (both counted in UsesCPU, which is every pick the device did not
	// hold). MappedWay says which way those picks take at one token
	// (engine.ExpertInfo's); empty where the GPU never pulls them.
	StreamedPicks uint64 `json:"streamed_picks,omitempty"`
	MappedPicks   uint64 `json:"mapped_picks,omitempty"`
	MappedWay     string `json:"mapped_way,omitempty"`
}

// TierCRoute is how a model's tier-C bytes reach compute: "file" (O_DIRECT
// reads of the pool file), "nvme-pinned" (the userspace NVMe driver into
// DMA staging in host memory, registered with CUDA on a GPU) or
// "nvme-bar" (the driver straight into a GPU slot through its BAR).
type TierCRoute struct {
	Route string `json:"route"`
	// Via details the route: the driver's queues and depth, the file.
	Via string `json:"via,omitempty"`
	// Refused maps each route not taken to the reason.
	Refused map[string]string `json:"refused,omitempty"`
}

// BackendStatus describes the backend a model runs on: the GPU with its
// name and memory, or the CPU with the reason the GPU is not used.
type BackendStatus struct {
	// Name is "cpu" or "cuda"; Requested is what the load asked for
	// ("auto", "cpu" or "cuda").
	Name      string `json:"name"`
	Requested string `json:"requested"`
	// Reason says why the CPU runs a model whose load did not exclude the
	// GPU, e.g. "CUDA unavailable: cuInit: CUDA_ERROR_NO_DEVICE …".
	Reason string `json:"reason,omitempty"`
	// Device is the GPU's name, Ordinal its index and ComputeCapability
	// its SM version ("9.0"); DeviceMemoryBytes its memory and
	// DeviceFreeBytes what was free before the model loaded.
	Device            string `json:"device,omitempty"`
	Ordinal           int    `json:"ordinal"`
	ComputeCapability string `json:"compute_capability,omitempty"`
	DeviceMemoryBytes int64  `json:"device_memory_bytes,omitempty"`
	DeviceFreeBytes   int64  `json:"device_free_bytes,omitempty"`
	// Kernels is the kernel build the GPU runs: "sm_90 cubin (ptxas
	// 11.8)" or "compute_80 PTX (driver JIT)".
	Kernels string `json:"kernels,omitempty"`
	// WeightBytes is the device memory of the resident (tier-A)
	// weights, StreamedBytesPerPass what tier B copies over PCIe per
	// pass, KVBytes the KV cache allocated on the device for Slots
	// sequences of MaxContext positions.
	WeightBytes          int64 `json:"weight_bytes,omitempty"`
	StreamedBytesPerPass int64 `json:"streamed_bytes_per_pass,omitempty"`
	KVBytes              int64 `json:"kv_bytes,omitempty"`
	Slots                int   `json:"slots,omitempty"`
	MaxContext           int   `json:"max_context,omitempty"`
}

// Status is the response of GET /strata/v1/status.
type Status struct {
	Version string `json:"version"`
	// PID is the daemon's process id; shown to administrators only.
	PID       int           `json:"pid,omitempty"`
	StartedAt time.Time     `json:"started_at"`
	Uptime    float64       `json:"uptime_seconds"`
	Models    []ModelStatus `json:"models"`
	Limits    Limits        `json:"limits"`
	// Peer describes the caller as the daemon sees it, and whether it may
	// use the admin API.
	Peer  string `json:"peer"`
	Admin bool   `json:"admin"`
	// Block is the eBPF block tracer's per-disk view; nil when the daemon
	// was started without it.
	Block *BlockIO `json:"block_io,omitempty"`
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
	// Status is "ok" (HTTP 200) when a model is ready, "loading" or "no
	// model loaded" (HTTP 503) otherwise.
	Status string `json:"status"`
	Models int    `json:"models"`
	// Loading is the loads in progress.
	Loading int `json:"loading,omitempty"`
}
