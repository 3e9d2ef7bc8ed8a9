// Package bench measures the links a streamed model's bytes cross — storage
// (queue depth × block size sweeps of GB/s, IOPS and latency percentiles),
// PCIe (host↔device copies from pinned and pageable memory) and storage →
// GPU end to end — so that people deploying strata can see how fast each
// link of their machine is before asking why a model runs at the speed it
// does, and so that the planner's bandwidth figures can be checked.
//
// The package holds the sweep logic and the result types only. It talks to
// hardware through small interfaces (Target and Worker for storage, Copier
// for PCIe, Stager and Uploader for end-to-end routes), implemented for
// O_DIRECT files, the userspace NVMe driver and the CUDA binding in package
// internal/bench/hw, and by in-memory fakes in tests. It imports nothing but the
// standard library, so the daemon's wire types (daemon/api) can carry its
// results and the unprivileged client links none of the drivers through it.
// Nothing here prints: callers render results (tables, JSON, internal/bench/plot).
package bench
