//go:build !(linux && amd64)

package hostcpu

import "errors"

// EnableAMX is Linux's on x86-64 alone: other systems report AMX unavailable.
func EnableAMX() error { return errors.New("amx: tile permission is asked for on x86-64 Linux only") }
