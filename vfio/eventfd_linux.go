package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// EventFD is a Linux eventfd: the kernel adds to its counter when the MSI-X
// vector it is wired to fires, and a reader takes (and resets) the count. It
// is non-blocking and registered with the Go runtime's poller, so Wait parks
// only the calling goroutine.
type EventFD struct {
	fd int // the raw fd: os.File.Fd would switch it to blocking mode
	f  *os.File
}

// NewEventFD creates an eventfd with a zero count.
func NewEventFD() (*EventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &EventFD{fd: fd, f: os.NewFile(uintptr(fd), "eventfd")}, nil
}

// FD is the file descriptor to hand to the kernel (VFIO_DEVICE_SET_IRQS).
func (e *EventFD) FD() int { return e.fd }

// Wait blocks until the counter is non-zero or the timeout passes, and
// returns the count (the number of signals since the last read). A timeout
// returns an error wrapping os.ErrDeadlineExceeded.
func (e *EventFD) Wait(timeout time.Duration) (uint64, error) {
	if err := e.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, fmt.Errorf("eventfd deadline: %w", err)
	}
	var b [8]byte
	n, err := e.f.Read(b[:])
	if err != nil {
		return 0, fmt.Errorf("waiting on eventfd: %w", err)
	}
	if n != 8 {
		return 0, fmt.Errorf("eventfd read returned %d bytes", n)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// Poll returns the count without blocking (0 when nothing was signalled).
func (e *EventFD) Poll() (uint64, error) {
	var b [8]byte
	n, err := unix.Read(e.fd, b[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading eventfd: %w", err)
	}
	if n != 8 {
		return 0, fmt.Errorf("eventfd read returned %d bytes", n)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// Signal adds v to the counter, as the kernel does on an interrupt.
func (e *EventFD) Signal(v uint64) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := e.f.Write(b[:]); err != nil {
		return fmt.Errorf("signalling eventfd: %w", err)
	}
	return nil
}

// Close closes the eventfd (after the kernel was told to stop using it).
func (e *EventFD) Close() error { return e.f.Close() }
