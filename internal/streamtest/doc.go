// Package streamtest builds small stream.LayerStores from in-memory model
// weights, so the pipeline can be tested and benchmarked without a real
// pool: each layer's tensors are written contiguously into one 4 KiB
// aligned extent of a flat file, with a CRC-32C per extent. It mirrors the
// contract of engine/prefab's pool (one sequential read per layer, zero-copy
// mapped views verified on first use) in the fewest lines, and is not a
// file format anyone should keep.
package streamtest
