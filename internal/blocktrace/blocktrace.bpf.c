// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// Block-layer I/O accounting for package blocktrace: per-device request
// counts, bytes and a log2 latency histogram, from the block_rq_issue and
// block_rq_complete tracepoints (BTF-enabled, "tp_btf"). Kernel structures
// are declared here with only the fields read, marked preserve_access_index
// so libbpf-style CO-RE relocations fit them to the running kernel's BTF at
// load time; no vmlinux.h is needed. Since Linux 5.11 both tracepoints take
// the request alone (block_rq_complete adds the status and the byte count).
//
// Regenerate with `go generate ./blocktrace` (clang, libbpf-dev headers);
// the .o and .go outputs are committed.

//go:build ignore

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// Latency buckets: slot i counts completions whose latency in microseconds
// has its highest set bit at i (slot 0 also takes 0 µs), up to ~2^31 µs.
#define SLOTS 32
// Operation classes: REQ_OP_READ (0), REQ_OP_WRITE (1), everything else
// (flush, discard, write-zeroes, driver-private).
#define OP_READ 0
#define OP_WRITE 1
#define OP_OTHER 2
#define OPS 3
#define REQ_OP_MASK 0xff

struct gendisk {
	int major;
	int first_minor;
} __attribute__((preserve_access_index));

struct request_queue {
	struct gendisk *disk;
} __attribute__((preserve_access_index));

struct block_device {
	__u32 bd_dev;
} __attribute__((preserve_access_index));

struct request {
	struct request_queue *q;
	__u32 cmd_flags;
	unsigned int __data_len;
	struct block_device *part;
} __attribute__((preserve_access_index));

// issued is what issue records for complete to find.
struct issued {
	__u64 issued_ns;
	__u32 dev; // kernel dev_t: major << 20 | minor
	__u32 op;
};

// devstats is one device's counters; the map is per CPU, user space sums.
struct devstats {
	__u64 ios[OPS];     // requests completed in full
	__u64 bytes[OPS];   // bytes completed (partial completions included)
	__u64 errors;       // completions with a non-zero blk_status_t
	__u64 untimed[OPS]; // ios whose issue the tracer has no record of
	__u64 hist[OPS][SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); // the request's address
	__type(value, struct issued);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); // kernel dev_t of the whole disk
	__type(value, struct devstats);
} stats SEC(".maps");

// zero is a template for new stats entries (too large for the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct devstats);
} zero SEC(".maps");

static __always_inline __u32 devof(struct request *rq)
{
	struct gendisk *disk = rq->q->disk;
	if (disk)
		return ((__u32)disk->major << 20) | (__u32)disk->first_minor;
	if (rq->part)
		return rq->part->bd_dev;
	return 0;
}

static __always_inline __u32 opof(__u32 flags)
{
	switch (flags & REQ_OP_MASK) {
	case 0:
		return OP_READ;
	case 1:
		return OP_WRITE;
	default:
		return OP_OTHER;
	}
}

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;
	// Binary search for the highest set bit, without loops.
	if (v >> 32) { v >>= 32; slot += 32; }
	if (v >> 16) { v >>= 16; slot += 16; }
	if (v >> 8) { v >>= 8; slot += 8; }
	if (v >> 4) { v >>= 4; slot += 4; }
	if (v >> 2) { v >>= 2; slot += 2; }
	if (v >> 1) { slot += 1; }
	return slot < SLOTS ? slot : SLOTS - 1;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct issued in = {
		.issued_ns = bpf_ktime_get_ns(),
		.dev = devof(rq),
		.op = opof(rq->cmd_flags),
	};
	bpf_map_update_elem(&inflight, &key, &in, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete, struct request *rq, unsigned char error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct issued *in = bpf_map_lookup_elem(&inflight, &key);
	// Without the issue's record (the request was issued before the
	// tracer attached, or the record was lost: a hash map update from a
	// tracing program fails with -EBUSY when it interrupts another update
	// of the same map on its CPU, which happens under concurrent I/O) the
	// completion is still counted, from the request itself, but not
	// timed: counting only what was recorded at issue lost whole requests.
	__u32 dev = in ? in->dev : devof(rq);
	__u32 op = in ? in->op : opof(rq->cmd_flags);
	if (op >= OPS)
		return 0;
	struct devstats *st = bpf_map_lookup_elem(&stats, &dev);
	if (!st) {
		__u32 z = 0;
		struct devstats *tmpl = bpf_map_lookup_elem(&zero, &z);
		if (!tmpl)
			return 0;
		bpf_map_update_elem(&stats, &dev, tmpl, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&stats, &dev);
		if (!st)
			return 0;
	}
	st->bytes[op] += nr_bytes;
	if (error)
		st->errors++;
	// The tracepoint fires before the request's remaining length is
	// reduced, so nr_bytes < __data_len is a partial completion: more
	// completions of the same request follow.
	if (nr_bytes < rq->__data_len)
		return 0;
	st->ios[op]++;
	if (!in) {
		st->untimed[op]++;
		return 0;
	}
	__u64 us = (bpf_ktime_get_ns() - in->issued_ns) / 1000;
	st->hist[op][log2_slot(us)]++;
	bpf_map_delete_elem(&inflight, &key);
	return 0;
}
