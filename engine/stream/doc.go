// Package stream moves a model's layers through the SLEP pipeline (storage
// → staging → device slot → compute) so a model larger than the fast
// memory runs anyway, each streamed byte moving once per forward pass and
// overlapped with compute.
//
// Three pieces fit together:
//
//   - A LayerStore (implemented by engine/prefab's Pool) says where each
//     layer's bytes lie (one extent per layer, one sequential read), gives a
//     zero-copy mapped view of them (tier B), verifies checksums of bytes
//     read from storage (tier C) and decodes an extent's bytes into
//     model.Layer views.
//   - A Source (the interface is engine/tier's, so storage packages can
//     implement it without importing the engine) reads extents into
//     caller-provided aligned buffers with several reads in flight:
//     FileSource (O_DIRECT + pread on a pool of goroutines), MmapSource
//     (page cache) and FaultySource (error injection for tests) here,
//     nvme/volume's Source over the userspace NVMe driver.
//   - A Pipeline implements model.LayerSource for a plan that puts every
//     layer on tier A (resident, decoded once), B (host memory, copied to the
//     device per pass) or C (storage, read and copied per pass). It keeps a
//     ring of k staging buffers and k device slots, prefetches up to k layers
//     ahead of compute, and reports per-stage bytes, busy and stall time,
//     link bandwidths and an overlap ratio as Stats.
//
// The pipeline is the only one strata has: every backend runs its streamed
// layers through it by implementing Device, the seam that allocates slots,
// pins staging buffers, copies host bytes into a slot asynchronously and
// fences the copy against compute. CPUDevice (host memory, parallel
// memmove) is the reference; the CUDA backend (engine/gpu) plugs in a copy
// stream beside its compute stream, with events as fences, and computes on
// the slots themselves (Acquire and Done rather than Layer and Release).
//
// The package makes no system calls of its own: file reads, mappings and
// aligned memory come from internal/hostmem.
package stream
