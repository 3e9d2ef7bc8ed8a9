// Package peer identifies the process at the other end of a Unix-socket
// connection. stratad authorises every request by who the kernel says the
// peer is (SO_PEERCRED), never by anything the peer sends, so this is the
// one place that asks the kernel: the getsockopt call is fenced in
// ucred_linux.go and everything else works on the typed Cred it returns.
package peer
