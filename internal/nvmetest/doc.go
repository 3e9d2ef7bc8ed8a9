// Package nvmetest is a software NVMe controller for the driver's unit
// tests: it implements nvme.MMIO (the register file and doorbells),
// nvme.DMA (an IOVA space backed by Go memory) and nvme.Interrupts, and
// processes admin and NVM submission queues on a goroutine, triggered by
// doorbell writes, against in-memory namespaces.
//
// It is strict where the driver could be wrong (PRP alignment and list
// walking, queue sizes and IDs, MDTS, LBA ranges, IOVAs that were never
// allocated) and has knobs that make the hard cases deterministic: pausing
// to fill queues and batch completions, shuffled (out-of-order)
// completions, small queues for phase wrap, injected status codes per LBA
// range, hung or slow commands (timeouts, abort), a controller fatal status
// and its reset.
package nvmetest
