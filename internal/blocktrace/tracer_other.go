//go:build !linux

package blocktrace

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// Tracer is unavailable off Linux.
type Tracer struct{}

// Start always fails off Linux, with ErrNotSupported.
func Start(log hclog.Logger) (*Tracer, error) {
	return nil, fmt.Errorf("%w: %s has no eBPF block tracepoints", ErrNotSupported, runtime.GOOS)
}

// Snapshot fails: there is no tracer.
func (t *Tracer) Snapshot() (Snapshot, error) {
	return Snapshot{}, errors.New("blocktrace: not supported")
}

// Close does nothing.
func (t *Tracer) Close() error { return nil }

func statDev(path string) (Dev, error) { return Dev{}, ErrNotSupported }
