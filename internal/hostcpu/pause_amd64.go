package hostcpu

// Pause is the spin-wait hint (x86's PAUSE): a loop polling for another
// thread's write calls it each time round, so that it neither starves the
// core's other hardware thread nor floods the memory system with loads.
//
//go:noescape
func Pause()
