// Package tier decides where each layer of a model lives and stores models
// in the form the streaming engine reads fastest.
//
// Two concepts live here:
//
//   - The prefab pool (pool.go, format.go, write.go): a model rewritten so
//     that every transformer layer is one 4 KiB-aligned extent holding its
//     tensors in the order the forward pass consumes them, each extent
//     carrying an xxh3 checksum, behind a manifest with the architecture,
//     the tokenizer and every tensor's type, shape and offset. Streaming a
//     layer is then one sequential read (no scatter/gather), a layer read
//     from storage can be verified before it is used, and the pool can be
//     mapped zero-copy as the tier-B source.
//   - The planner (plan.go, links.go, hw.go): from the per-layer byte
//     sizes, the device and host memory budgets, the KV cache and scratch
//     the configured context and batch need, and the measured bandwidth of
//     each link, it puts every layer on tier A (resident in device memory),
//     B (host RAM, copied to the device every pass) or C (storage, read
//     every pass) and picks the pipeline depth, so the slowest link bounds a
//     pass as little as the budgets allow.
//
// engine/stream consumes both: it streams the pool's extents according to
// the plan. This package does no I/O scheduling of its own.
package tier
