// Package hostcpu is the host's CPUs as strata's compute threads see them:
// which logical CPUs the process may run on, in the order threads should
// take them (one per physical core before any core's second hardware
// thread, since two threads of one core share its load ports and caches),
// and pinning the calling goroutine's OS thread to one of them.
//
// Pinning exists so that a measurement, or a team of compute threads,
// runs one thread per core instead of wherever the scheduler drifts: two
// threads sharing a core read memory at the speed of one. Pin always
// hands back a restore function that puts the thread's previous affinity
// back before the thread returns to the Go runtime's pool, so no other
// goroutine inherits a pinned thread. Pause is the spin-wait hint for
// threads that poll for each other's work. EnableAMX asks the kernel for
// the tile registers the CPU's AMX matrix kernels use.
//
// The affinity system calls are Linux's; elsewhere CPUs lists GOMAXPROCS
// CPUs in order and Pin only locks the goroutine to its thread.
package hostcpu
