package main

import (
	"bytes"
	"sync"
)

// lockedBuffer collects a running daemon's log: os/exec copies the
// process's output into it from its own goroutine while the test reads
// it, so both sides take the lock.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
