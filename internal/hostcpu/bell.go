package hostcpu

import "sync/atomic"

// Bell is a count that threads sleep on until it moves: the kernel's
// futex on Linux. It exists for a team of compute threads whose sleepers
// must wake together and at once: a goroutine parked on a channel or a
// sync.Cond is woken by the Go scheduler, which starts one idle thread at
// a time and lets each start the next, so waking fifteen of them takes
// fifteen thread wake-ups in a row; threads asleep in the kernel on a
// bell of their own are each woken by one system call and run as soon as
// their CPU does. The zero Bell is ready to use; a Bell must not be
// copied after first use.
type Bell struct {
	n atomic.Uint32
	bellOS
}

// Load returns the count, to be passed to Sleep: read it before checking
// the condition a ring announces, so that a ring between the check and
// the sleep ends the sleep at once.
func (b *Bell) Load() uint32 { return b.n.Load() }

// Ring moves the count on and wakes every thread asleep on it.
func (b *Bell) Ring() {
	b.n.Add(1)
	b.wake()
}

// Sleep returns once the count differs from seen: at once if it already
// does. Signals and spurious wake-ups do not end it early.
func (b *Bell) Sleep(seen uint32) {
	for b.n.Load() == seen {
		b.wait(seen)
	}
}
