// Package tier is the vocabulary of tiered storage and the planner that
// uses it: the words the engine and the storage packages share, so that
// storage (nvme/volume) can serve the engine's tier C while importing no
// engine package.
//
//   - The vocabulary (vocab.go, source.go): Tier (A = device memory, B =
//     host RAM, C = storage), Extent (one aligned byte range of a pool,
//     read in one go), PageSize (the O_DIRECT and NVMe-LBA granule), and
//     Source, the interface every tier-C reader implements (engine/stream's
//     file and mmap sources, nvme/volume's NVMe source), with the Buffer it
//     reads into.
//   - The planner (plan.go, forced.go, links.go, hw.go): from the
//     per-layer byte sizes, the device and host memory budgets, the KV
//     cache and scratch the configured context and batch need, and the
//     measured bandwidth of each link, it puts every layer on tier A, B or
//     C and picks the pipeline depth, so the slowest link bounds a pass as
//     little as the budgets allow.
//
// The pool format that stores a model as one extent per layer is
// engine/prefab's; engine/stream streams a pool's extents according to a
// plan. This package does no I/O scheduling of its own, and it imports no
// engine package but engine/quant (the weight formats whose kernel speed
// the compute link is measured with).
package tier
