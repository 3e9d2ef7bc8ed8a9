// Package blocktrace counts block-layer I/O per device with eBPF, so that
// strata can show what the storage under a file source is really doing while
// layers stream: bytes and requests per second for reads, writes and other
// operations, and a latency histogram from request issue to completion.
//
// The BPF programs attach to the block_rq_issue and block_rq_complete
// tracepoints through BTF ("tp_btf"), so the running kernel must publish its
// BTF (/sys/kernel/btf/vmlinux) and the caller needs CAP_BPF and CAP_PERFMON
// (or root). Start says which is missing with an error wrapping
// ErrNotSupported or ErrPermission; callers log it and carry on without
// the statistics.
//
// This is not the blktrace(8) ioctl interface: it keeps counters in BPF maps
// in the kernel and user space reads them (Snapshot) when asked; nothing is
// streamed per request.
package blocktrace
