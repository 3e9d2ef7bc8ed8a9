//go:build !linux

package hostcpu

import "runtime"

// CPUs returns GOMAXPROCS CPUs numbered from 0, each its own core: without
// Linux's affinity calls the package knows no topology.
func CPUs() (cpus []int, cores int, err error) {
	n := runtime.GOMAXPROCS(0)
	for c := range n {
		cpus = append(cpus, c)
	}
	return cpus, n, nil
}

// Pin only locks the calling goroutine to its OS thread: binding a thread
// to a CPU is Linux's here. restore unlocks it.
func Pin(cpu int) (restore func() error, err error) {
	runtime.LockOSThread()
	return func() error { runtime.UnlockOSThread(); return nil }, nil
}
