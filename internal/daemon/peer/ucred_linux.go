package peer

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// FromConn asks the kernel for the credentials of c's peer with
// getsockopt(SO_PEERCRED). It is the only syscall in the daemon's
// authorisation path. c must be a *net.UnixConn (ErrNotUnix otherwise).
func FromConn(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, ErrNotUnix
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var u *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		u, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return Cred{}, fmt.Errorf("getsockopt SO_PEERCRED: %w", serr)
	}
	return Cred{PID: int(u.Pid), UID: int(u.Uid), GID: int(u.Gid)}, nil
}
