package cpubench

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// asmLoops are the assembly loops this CPU runs, each wrapped to take any
// length (the tail in Go).
func asmLoops() map[string]func([]byte) uint64 {
	wrap := func(f func(*byte, int) uint64) func([]byte) uint64 {
		return func(b []byte) uint64 {
			n := len(b) / readStep * readStep
			var s uint64
			if n > 0 {
				s = f(unsafe.SliceData(b), n)
			}
			return s ^ readGo(b[n:])
		}
	}
	m := map[string]func([]byte) uint64{}
	if cpu.X86.HasAVX2 {
		m["readAVX2"] = wrap(readAVX2)
	}
	if cpu.X86.HasAVX512F {
		m["readAVX512"] = wrap(readAVX512)
	}
	return m
}
