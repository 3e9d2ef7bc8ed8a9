package listen

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// ErrInUse is returned by Unix when another process is serving the socket.
var ErrInUse = errors.New("socket is in use by a running daemon")

// Unix listens on a Unix socket at path with permission bits mode and,
// when gid >= 0, group gid. An existing socket file is first dialled: if
// something answers, Unix refuses with ErrInUse rather than unlinking a
// live daemon's socket; if nothing answers it is a stale leftover and is
// removed. A path that exists but is not a socket is never removed. The
// parent directory is created (mode 0755) when missing.
func Unix(path string, mode fs.FileMode, gid int) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("empty socket path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; not removing it", path)
		}
		c, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrInUse)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) && !errors.Is(derr, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: probing existing socket: %w", path, derr)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("setting group of %s to %d: %w", path, gid, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("setting mode of %s: %w", path, err)
	}
	return l, nil
}

// Systemd returns the sockets systemd passed by socket activation
// (LISTEN_FDS), split into Unix and TCP listeners; both are empty when the
// process was not socket-activated. The environment variables are unset so
// children do not inherit them.
func Systemd() (unix, tcp []net.Listener, err error) {
	ls, err := activation.Listeners()
	if err != nil {
		return nil, nil, fmt.Errorf("socket activation: %w", err)
	}
	for _, l := range ls {
		if l == nil {
			continue // a passed fd that is not a listening socket
		}
		switch l.Addr().Network() {
		case "unix":
			unix = append(unix, l)
		default:
			tcp = append(tcp, l)
		}
	}
	return unix, tcp, nil
}
