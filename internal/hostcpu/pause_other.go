//go:build !amd64

package hostcpu

// Pause is the spin-wait hint; this architecture's polling loops go
// without one.
func Pause() {}
