// Package listen opens stratad's listeners: the Unix socket (created with
// the right mode and group, never taking over a live daemon's socket) and
// the sockets systemd passes in through socket activation.
package listen
