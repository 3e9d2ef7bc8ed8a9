package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The hook protocol between a guest test and the host's relay (bedcheck
// hooks), one line each way on the guest's second serial port:
//
//	guest: HookRequest ID COMMAND     (an HMP command for QEMU's monitor)
//	host:  HookReply ID QUOTED-OUTPUT (strconv.Quote of the monitor's answer)
const (
	HookRequest = "STRATA-HOOK"
	HookReply   = "STRATA-HOOK-DONE"
)

var monitor struct {
	sync.Mutex
	f  *os.File
	r  *bufio.Reader
	id int
}

// Monitor runs an HMP command in the QEMU that runs this guest (e.g.
// `qemu-io DRIVE "break read_aio TAG"`, which parks the next read of a
// blkdebug drive until `resume TAG`) and returns its output. The host's
// relay carries it over the guest's second serial port; the test-bed
// gives it so that a test can make a device misbehave at the moment it
// chooses, which QEMU's command-line fault rules cannot.
func Monitor(cmd string, timeout time.Duration) (string, error) {
	path := os.Getenv("STRATA_TESTBED_HOOKS")
	if path == "" {
		return "", errors.New("testbed: no hook port (STRATA_TESTBED_HOOKS unset: the host started QEMU without the relay)")
	}
	if strings.ContainsAny(cmd, "\r\n") {
		return "", fmt.Errorf("testbed: monitor command %q spans lines", cmd)
	}
	monitor.Lock()
	defer monitor.Unlock()
	if monitor.f == nil {
		f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			return "", fmt.Errorf("testbed: hook port: %w", err)
		}
		monitor.f, monitor.r = f, bufio.NewReader(f)
	}
	monitor.id++
	id := strconv.Itoa(monitor.id)
	if _, err := fmt.Fprintf(monitor.f, "%s %s %s\n", HookRequest, id, cmd); err != nil {
		return "", fmt.Errorf("testbed: hook port: %w", err)
	}
	if err := monitor.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("testbed: hook port: %w", err)
	}
	for {
		line, err := monitor.r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("testbed: no answer from the host's hook relay to %q: %w", cmd, err)
		}
		f := strings.SplitN(strings.TrimRight(line, "\r\n"), " ", 3)
		if len(f) < 3 || f[0] != HookReply || f[1] != id {
			continue // an answer to an earlier request that timed out, or line noise
		}
		out, err := strconv.Unquote(f[2])
		if err != nil {
			return "", fmt.Errorf("testbed: hook relay answered %q: %w", f[2], err)
		}
		return out, nil
	}
}
