// Package nvme drives NVMe controllers from userspace, so that strata can
// stream model layers from an SSD into memory it chose (pinned host pages or
// a peer device's BAR) without the kernel's block layer and with the IOMMU
// on: every address the controller sees is an IOVA that the platform mapped.
//
// The driver is written against three small interfaces (MMIO, DMA and,
// optionally, Interrupts) so that the same code runs over VFIO in production
// (package nvme/vfiobus) and over the software controller of package
// internal/nvmetest in unit tests. It implements controller bring-up and clean
// shutdown, the admin queue, Identify, Set Features (number of queues),
// several I/O queue pairs, reads and writes described by PRP entries and PRP
// lists (requests larger than the controller's MDTS are split), queue depths
// above one with out-of-order completions, polled or MSI-X completion,
// per-command timeouts derived from CAP.TO, abort, controller reset (a live
// controller first has its I/O queues deleted, as Linux does) with
// resubmission of the commands in flight, and NVMe status codes decoded into
// typed errors (StatusError, ErrMedia, ErrTimeout, ...).
//
// All register accesses go through the accessors in regs.go: 32-bit loads
// and stores only, 64-bit registers split into two halves, because
// emulated controllers (QEMU) reject wider accesses and because a store to
// device memory must never be turned into a locked instruction.
package nvme
