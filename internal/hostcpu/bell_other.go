//go:build !linux

package hostcpu

import "sync"

// bellOS is a condition variable where the kernel's futex is Linux's: a
// sleeper checks the count under mu, and wake takes mu before it
// broadcasts, so a ring between the check and the sleep is never missed.
type bellOS struct {
	mu   sync.Mutex
	cond *sync.Cond
}

func (b *Bell) wait(seen uint32) {
	b.mu.Lock()
	if b.cond == nil {
		b.cond = sync.NewCond(&b.mu)
	}
	for b.n.Load() == seen {
		b.cond.Wait()
	}
	b.mu.Unlock()
}

func (b *Bell) wake() {
	b.mu.Lock()
	if b.cond != nil {
		b.cond.Broadcast()
	}
	b.mu.Unlock()
}
