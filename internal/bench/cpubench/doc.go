// Package cpubench is `strata bench cpu`: it measures the host CPU as a
// compute device, in one run — first the ceiling, the rate at which the
// cores read DRAM, then the CPU's GEMV kernels (engine/gemv) over weights
// far larger than the caches, each as a ratio to that ceiling at the same
// thread count. A ratio near 1 means the kernels run at memory speed,
// which is all a decode step of a model larger than the caches can ask.
//
// The ceiling comes from the package's own probe rather than a kernel's
// best case: one pinned thread per CPU, each reading its own slice of a
// large buffer whose pages were written first, with the widest loads the
// CPU has into eight independent accumulators (avo-generated assembly in
// ./asm; a portable Go loop elsewhere). A probe limited by its own
// instructions would understate memory and flatter every ratio, so the
// report also gives the probe's rate from L2 next to a plain Go loop's,
// and its tests hold it to beating that loop clearly.
//
// The GEMVs run through a gemv.Pool: chunks of rows taken in turn by
// pinned threads, the vector quantized once per product. Each kind cycles
// through several matrices of an 8B model's widest shape, so no matrix is
// still cached when it comes round again.
//
// The package prints nothing: progress goes to Options.Progress and the
// Report renders itself (WriteText) or marshals as JSON.
package cpubench
