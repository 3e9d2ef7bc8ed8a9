//go:build linux

package hostcpu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysCPU is where the kernel describes each CPU's topology; a test points
// it at a fake tree.
var sysCPU = "/sys/devices/system/cpu"

// CPUs returns the logical CPUs this process may run on (its thread's
// affinity mask), one of every physical core first, then the second
// hardware thread of every core, and so on; within each round, cores go
// by package, then core number. cores is the number of distinct physical
// cores among them. A CPU whose topology sysfs does not show counts as a
// core of its own.
func CPUs() (cpus []int, cores int, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, 0, fmt.Errorf("hostcpu: sched_getaffinity: %w", err)
	}
	var ids []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			ids = append(ids, c)
		}
	}
	cpus, cores = order(ids, topology)
	return cpus, cores, nil
}

// topology reads cpu's package and core number from sysfs.
func topology(cpu int) (pkg, core int, ok bool) {
	read := func(name string) (int, bool) {
		b, err := os.ReadFile(filepath.Join(sysCPU, "cpu"+strconv.Itoa(cpu), "topology", name))
		if err != nil {
			return 0, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return v, err == nil
	}
	pkg, ok1 := read("physical_package_id")
	core, ok2 := read("core_id")
	return pkg, core, ok1 && ok2
}

// Pin locks the calling goroutine to its OS thread and binds that thread
// to cpu. restore binds the thread back to the CPUs it had and unlocks
// the goroutine; when putting the affinity back fails, restore leaves the
// goroutine locked, so the thread ends with it rather than return pinned
// to the runtime's pool, and says so.
func Pin(cpu int) (restore func() error, err error) {
	if cpu < 0 || cpu >= len(unix.CPUSet{})*64 {
		return nil, fmt.Errorf("hostcpu: pin to CPU %d: out of range", cpu)
	}
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("hostcpu: pin to CPU %d: sched_getaffinity: %w", cpu, err)
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("hostcpu: pin to CPU %d: sched_setaffinity: %w", cpu, err)
	}
	return func() error {
		if err := unix.SchedSetaffinity(0, &old); err != nil {
			return fmt.Errorf("hostcpu: unpin from CPU %d: sched_setaffinity: %w (the thread stays locked to its goroutine)", cpu, err)
		}
		runtime.UnlockOSThread()
		return nil
	}, nil
}
