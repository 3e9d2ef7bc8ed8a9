// Package gguf reads and writes GGUF, the single-file model format of
// llama.cpp/ggml (versions 2 and 3, little-endian).
//
// strata loads models far larger than memory, so the reader parses only the
// header (metadata key/values and tensor infos) and leaves tensor bytes on
// disk, to be fetched through an io.ReaderAt or a read-only memory map. GGUF
// files come from the internet, so Open treats every byte as hostile: every
// count and length is checked against the bytes the file can actually hold
// before anything is allocated, tensors must lie inside the file, be aligned
// and not overlap, and no input makes it panic or allocate more than a small
// multiple of the file's size. The writer streams large models straight to
// disk through a big buffer so that writing runs at disk speed.
//
// Models too large for one download come split by llama.cpp's gguf-split
// (PREFIX-00001-of-00003.gguf, ...): Map opens the first part and maps the
// others beside it, so callers see one model (split.go).
package gguf
