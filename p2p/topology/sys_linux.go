package topology

import "golang.org/x/sys/unix"

// memlockLimit is RLIMIT_MEMLOCK's soft limit in bytes, -1 when unlimited
// and 0 when it cannot be read.
func memlockLimit() int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		return 0
	}
	if r.Cur == unix.RLIM_INFINITY {
		return -1
	}
	return int64(r.Cur)
}
