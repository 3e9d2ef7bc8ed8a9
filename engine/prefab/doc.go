// Package prefab stores models in the form the streaming engine reads
// fastest, and reads them back: the prefab pool.
//
// A pool is a model rewritten so that every transformer layer is one
// 4 KiB-aligned extent (an engine/tier Extent) holding its tensors in the
// order the forward pass consumes them, each extent carrying an xxh3
// checksum, behind a manifest with the architecture, the tokenizer and
// every tensor's type, shape and offset. Streaming a layer is then one
// sequential read (no scatter/gather), a layer read from storage can be
// verified before it is used, and the pool can be mapped zero-copy as the
// tier-B source.
//
//   - format.go: the file layout, header and manifest, and their
//     validation.
//   - write.go: WritePool and WriteModelPool convert a GGUF (or a loaded
//     model) into a pool, requantizing matrices to the prefab type.
//   - pool.go, streaming.go: OpenPool maps a pool, and Pool serves layer
//     extents, checksums and decoded model.Layer views (engine/stream's
//     LayerStore), plus the Sizes the planner (engine/tier) works from.
//   - sizes.go: SizesFromGGUF predicts a pool's sizes before it is written,
//     so a GGUF can be planned directly.
package prefab
