// Package hw connects package bench's sweeps to strata's hardware layers:
// files read with O_DIRECT through engine/stream's FileSource, namespaces
// read through the userspace NVMe driver (package nvme; the daemon holds the
// controllers), GPU copies through the CUDA binding (kernels/cudadrv), and the
// end-to-end storage → GPU routes, with hostcheck.Check's verdict on which
// routes exist on this host and why not. It holds no unsafe code and makes
// no system calls of its own: those stay fenced in the packages it adapts.
package hw
