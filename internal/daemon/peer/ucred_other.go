//go:build !linux

package peer

import (
	"errors"
	"net"
)

// FromConn is only implemented on Linux; elsewhere every peer is unknown
// and therefore never an administrator.
func FromConn(c net.Conn) (Cred, error) {
	return Cred{}, errors.New("peer credentials: SO_PEERCRED is Linux-only")
}
