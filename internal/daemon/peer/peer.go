package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Cred is the identity of a connected peer as the kernel recorded it when
// the peer connected (or called listen/socketpair).
type Cred struct {
	PID int // process id in the daemon's pid namespace
	UID int
	GID int
}

// ErrNotUnix is returned by FromConn for connections that are not Unix
// sockets (TCP peers have no kernel credentials).
var ErrNotUnix = errors.New("connection is not a Unix socket")

// Groups returns the supplementary group ids of the process cred.PID by
// reading the Groups line of /proc/PID/status, after checking that the
// process's real uid is still cred.UID (so a pid reused by another user's
// process is not mistaken for the peer). The primary gid is not included.
// procRoot is normally "/proc"; tests may point it at a fixture.
func Groups(procRoot string, cred Cred) ([]int, error) {
	if cred.PID <= 0 {
		return nil, fmt.Errorf("peer has no pid (%d)", cred.PID)
	}
	path := fmt.Sprintf("%s/%d/status", procRoot, cred.PID)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading peer groups: %w", err)
	}
	defer f.Close()
	return parseStatus(f, path, cred.UID)
}

// parseStatus extracts the Groups line from a /proc/PID/status file and
// checks its Uid line's real uid against uid.
func parseStatus(f io.Reader, path string, uid int) ([]int, error) {
	var groups []int
	sawUID, sawGroups := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		switch key {
		case "Uid":
			if len(fields) == 0 {
				return nil, fmt.Errorf("%s: empty Uid line", path)
			}
			real, err := strconv.Atoi(fields[0])
			if err != nil {
				return nil, fmt.Errorf("%s: bad Uid line %q", path, line)
			}
			if real != uid {
				return nil, fmt.Errorf("%s: process uid %d is not the peer's uid %d (pid reused?)", path, real, uid)
			}
			sawUID = true
		case "Groups":
			for _, s := range fields {
				g, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("%s: bad Groups line %q", path, line)
				}
				groups = append(groups, g)
			}
			sawGroups = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if !sawUID || !sawGroups {
		return nil, fmt.Errorf("%s: no Uid or Groups line", path)
	}
	return groups, nil
}
