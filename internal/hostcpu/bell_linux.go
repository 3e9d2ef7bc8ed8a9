package hostcpu

import (
	"math"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex operations Bell uses (futex(2)): private to the process, so
// the kernel keys the word by its address in this address space alone.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// bellOS is empty on Linux: the count itself is the futex word.
type bellOS struct{}

// wait sleeps in the kernel while the count is seen. unix.Syscall6 tells
// the Go runtime the thread is in a system call, so a goroutine that needs
// the thread's P gets it while the thread sleeps. An error (EAGAIN: the
// count had moved; EINTR: a signal) returns to Sleep's loop, which looks
// at the count again.
func (b *Bell) wait(seen uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&b.n)), futexWaitPrivate, uintptr(seen), 0, 0, 0)
}

// wake wakes every thread asleep on the count.
func (b *Bell) wake() {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&b.n)), futexWakePrivate, math.MaxInt32, 0, 0, 0)
}
