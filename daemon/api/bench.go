package api

import "github.com/strata-llm/strata/bench"

// The bench API: stratad measures what only it may touch — the NVMe
// controllers it holds (the userspace driver needs root and VFIO) and its
// GPU — for any peer that may run inference, so unprivileged users can
// benchmark the machine without the admin API. One bench runs at a time
// (429 bench_busy otherwise), and requests are bounded (BenchMaxPoints,
// BenchMaxPointSeconds, BenchMaxSeconds).
//
//	POST /strata/v1/bench/storage  any peer  BenchStorageRequest → NDJSON BenchEvent lines
//	POST /strata/v1/bench/pcie     any peer  BenchPCIeRequest    → NDJSON BenchEvent lines
//	POST /strata/v1/bench/e2e      any peer  BenchE2ERequest     → NDJSON BenchEvent lines
//
// A request that cannot start fails with an ordinary error response
// (409 device_not_bound, 503 cuda_unavailable, …). Once it has started
// the response is 200 and application/x-ndjson: one BenchEvent per line,
// progress events while the sweep runs, then exactly one event carrying
// the result or an error.
const (
	PathBenchStorage = "/strata/v1/bench/storage"
	PathBenchPCIe    = "/strata/v1/bench/pcie"
	PathBenchE2E     = "/strata/v1/bench/e2e"
)

// Bounds on one bench request.
const (
	BenchMaxPoints       = 512
	BenchMaxPointSeconds = 10.0
	BenchMaxSeconds      = 600.0 // estimated storage sweep time
	BenchMaxE2EBytes     = 64 << 30
	BenchMaxCopyBytes    = 4 << 30
)

// BenchStorageRequest asks for a storage sweep of a namespace of a
// controller stratad holds (BDF and NSID) or of a file in its model
// directories (Path).
type BenchStorageRequest struct {
	BDF  string `json:"bdf,omitempty"`
	NSID int    `json:"nsid,omitempty"`
	Path string `json:"path,omitempty"`
	// BlockSizes and QueueDepths default to bench.DefaultBlockSizes and
	// bench.DefaultQueueDepths.
	BlockSizes  []int `json:"block_sizes,omitempty"`
	QueueDepths []int `json:"queue_depths,omitempty"`
	// Pattern is "seq" (default) or "rand".
	Pattern string `json:"pattern,omitempty"`
	// PointSeconds is each point's measured time (default 0.5).
	PointSeconds float64 `json:"point_seconds,omitempty"`
	// RegionBytes bounds the bytes read from the start (0: all).
	RegionBytes int64  `json:"region_bytes,omitempty"`
	Seed        uint64 `json:"seed,omitempty"`
}

// BenchPCIeRequest asks for a PCIe copy sweep on the daemon's GPU.
type BenchPCIeRequest struct {
	GPU int `json:"gpu,omitempty"`
	// Sizes default to bench.DefaultPCIeSizes (64 KiB … 1 GiB).
	Sizes []int64 `json:"sizes,omitempty"`
	// Directions ("H2D", "D2H") and Memory ("pinned", "pageable")
	// default to both.
	Directions []string `json:"directions,omitempty"`
	Memory     []string `json:"memory,omitempty"`
	// PointBytes is about how many bytes each point moves (default 4 GiB).
	PointBytes int64 `json:"point_bytes,omitempty"`
}

// BenchE2ERequest asks which storage → GPU routes exist on the daemon's
// host, and for a measurement of those that can run: the NVMe routes
// over a held controller's namespace (BDF, NSID), the file route over a
// file in the model directories (Path).
type BenchE2ERequest struct {
	BDF   string `json:"bdf,omitempty"`
	NSID  int    `json:"nsid,omitempty"`
	Path  string `json:"path,omitempty"`
	GPU   int    `json:"gpu,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	Chunk int    `json:"chunk,omitempty"`
	Slots int    `json:"slots,omitempty"`
}

// BenchEvent is one line of a bench response.
type BenchEvent struct {
	Progress *bench.Progress      `json:"progress,omitempty"`
	Storage  *bench.StorageResult `json:"storage,omitempty"`
	PCIe     *bench.PCIeResult    `json:"pcie,omitempty"`
	E2E      *bench.E2EResult     `json:"e2e,omitempty"`
	Error    *BenchError          `json:"error,omitempty"`
}

// BenchError is a failure after the response started: the status the
// daemon would have sent had it known at the start.
type BenchError struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}
