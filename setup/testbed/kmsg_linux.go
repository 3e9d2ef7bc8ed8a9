package testbed

import (
	"fmt"
	"strings"
	"syscall"
)

// KernelLog returns the kernel log messages logged so far (from /dev/kmsg),
// e.g. to find the DMAR fault a blocked DMA leaves: QEMU's NVMe completes
// such a command with success, so the log and the data are the evidence.
func KernelLog() ([]string, error) {
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/kmsg: %w", err)
	}
	defer syscall.Close(fd)
	var lines []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(fd, buf) // one record per read
		if err == syscall.EPIPE {
			continue // records overwritten while reading
		}
		if err != nil || n <= 0 {
			return lines, nil // EAGAIN: the end of the log
		}
		if _, msg, ok := strings.Cut(string(buf[:n]), ";"); ok {
			msg, _, _ = strings.Cut(msg, "\n") // continuation lines hold key=value metadata
			lines = append(lines, msg)
		}
	}
}
