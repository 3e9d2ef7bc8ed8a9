package nvme

import (
	"sync"
	"sync/atomic"
)

// Ticket is the completion of one submitted request, which the driver may
// have split into several commands. The data buffer must not be reused or
// freed before Done is closed: until then the controller may still write it.
// Every ticket completes: commands that hang are aborted or failed by a
// controller reset.
type Ticket struct {
	done      chan struct{}
	remaining atomic.Int32
	mu        sync.Mutex
	err       error
	result    uint32
}

func newTicket(parts int) *Ticket {
	t := &Ticket{done: make(chan struct{})}
	t.remaining.Store(int32(parts))
	return t
}

// Done is closed when every command of the request has completed.
func (t *Ticket) Done() <-chan struct{} { return t.done }

// Err is the request's first error; valid once Done is closed.
func (t *Ticket) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Result is DW0 of the (last) completion: command specific, e.g. the
// queue counts granted by Set Features.
func (t *Ticket) Result() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.result
}

// Wait blocks until the request completes and returns its error.
func (t *Ticket) Wait() error {
	<-t.done
	return t.Err()
}

// part records the completion of one command.
func (t *Ticket) part(err error, result uint32) {
	t.mu.Lock()
	if err != nil && t.err == nil {
		t.err = err
	}
	t.result = result
	t.mu.Unlock()
	if t.remaining.Add(-1) == 0 {
		close(t.done)
	}
}

// skip accounts for parts that were never submitted.
func (t *Ticket) skip(n int, err error) {
	for i := 0; i < n; i++ {
		t.part(err, 0)
	}
}
