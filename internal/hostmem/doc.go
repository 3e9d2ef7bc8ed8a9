// Package hostmem fences strata's host-memory system calls behind a small
// typed API: read-only file mappings (Map), page-aligned anonymous memory
// that may be backed by huge pages and locked (Alloc), files read with
// O_DIRECT (OpenDirect) and the alignment helpers they need (AlignUp).
//
// Model files are mapped rather than read because a model larger than RAM
// must still be addressable, and mapped bytes serve tier B without a copy;
// direct reads bypass the page cache so a streamed model does not evict
// everything else; aligned memory is what direct reads (and DMA) need.
// Keeping every mmap, munmap, mlock and O_DIRECT open here means one place
// retries EINTR, wraps errors with what was asked, and frees exactly what
// it mapped. Device memory (VFIO regions, CUDA host allocations) is mapped
// by the packages that own those devices, not here.
//
// Mappings and the alignment helpers build on every Unix, so the format
// packages that map model files (engine/gguf, engine/safetensors) keep
// building there; direct reads and Alloc are Linux's, like the streaming
// engine that uses them.
package hostmem
