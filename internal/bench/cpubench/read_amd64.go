package cpubench

import "golang.org/x/sys/cpu"

// readLoop and readKernel are the widest read loop this CPU (and OS,
// which must save the wide registers; x/sys/cpu checks) runs.
var readLoop, readKernel = func() (func(*byte, int) uint64, string) {
	switch {
	case cpu.X86.HasAVX512F:
		return readAVX512, "avx512"
	case cpu.X86.HasAVX2:
		return readAVX2, "avx2"
	}
	return readGoPtr, "go"
}()
