//go:build linux

package quant

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the calling thread's CPU time. Benchmarks lock their
// goroutine to its thread and report throughput per CPU-second, which stays
// meaningful on a machine shared with other work.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

// processCPU returns the CPU time of all the process's threads.
func processCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
