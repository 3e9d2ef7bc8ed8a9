package cpubench

import "unsafe"

// readStep is the bytes every read loop takes per round: eight 64-byte
// loads, AVX-512's widest, so every loop's length rule is met by one.
const readStep = 512

// read reads every byte of b and returns a value that depends on all of
// them (so the loads stay live), with the fastest loop this CPU has.
func read(b []byte) uint64 {
	n := len(b) / readStep * readStep
	var sum uint64
	if n > 0 {
		sum = readLoop(unsafe.SliceData(b), n)
	}
	return sum ^ readGo(b[n:])
}

// readGo is the portable read loop: eight independent 64-bit
// accumulators, the fallback on CPUs without wide vector loads and the
// tail of every other loop.
func readGo(b []byte) uint64 {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	var a0, a1, a2, a3, a4, a5, a6, a7 uint64
	for len(w) >= 8 {
		a0 ^= w[0]
		a1 ^= w[1]
		a2 ^= w[2]
		a3 ^= w[3]
		a4 ^= w[4]
		a5 ^= w[5]
		a6 ^= w[6]
		a7 ^= w[7]
		w = w[8:]
	}
	for _, v := range w {
		a0 ^= v
	}
	for _, c := range b[len(b)/8*8:] {
		a1 ^= uint64(c)
	}
	return a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7
}

// naiveRead is the loop one would write first, a sum of 64-bit words:
// the yardstick the probe's loop must beat clearly, since a probe limited
// by its own instructions would understate memory and flatter every ratio
// to it.
func naiveRead(b []byte) uint64 {
	var s uint64
	for _, v := range unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8) {
		s += v
	}
	return s
}

// readGoPtr is readGo with the assembly loops' signature.
func readGoPtr(p *byte, n int) uint64 { return readGo(unsafe.Slice(p, n)) }
