package hostcpu

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arch_prctl(2) codes for the dynamically enabled XSAVE features (Linux
// 5.16 and later): asking for a feature's permission, and reading the
// features the process may use.
const (
	archGetXCompPerm = 0x1022
	archReqXCompPerm = 0x1023
	// xfeatureTileData is AMX's tile data: 8 KiB of register state the
	// kernel saves only for processes that asked for it.
	xfeatureTileData = 18
)

var amx struct {
	once sync.Once
	err  error
}

// EnableAMX asks the kernel, once for the process, for permission to use
// AMX's tile registers. Linux leaves them off by default because their
// state is large: the first tile instruction of a process that did not ask
// is killed with SIGILL. The permission covers every thread of the
// process, those started later included. Go's signal stacks are 32 KiB,
// more than the kernel's signal frame with the tiles needs, so the request
// does not fail on their account (it fails where the kernel or the CPU
// lacks the feature).
func EnableAMX() error {
	amx.once.Do(func() {
		if _, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureTileData, 0); e != 0 {
			amx.err = fmt.Errorf("amx: asking for the tile data permission: %w", e)
			return
		}
		var mask uint64
		if _, _, e := unix.Syscall(unix.SYS_ARCH_PRCTL, archGetXCompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
			amx.err = fmt.Errorf("amx: reading the permitted features: %w", e)
			return
		}
		if mask&(1<<xfeatureTileData) == 0 {
			amx.err = fmt.Errorf("amx: the kernel granted the tile data permission but does not list it (features %#x)", mask)
		}
	})
	return amx.err
}
