package cudadrv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Module is a loaded CUmodule (PTX JIT-compiled for the device).
type Module uintptr

// Function is a kernel entry point of a Module.
type Function uintptr

// JIT options for cuModuleLoadDataEx (CUjit_option).
const (
	jitInfoLogBuffer          = 3
	jitInfoLogBufferSizeBytes = 4
	jitErrorLogBuffer         = 5
	jitErrorLogBufferSize     = 6
)

// LoadModule loads a module image for the device (cuModuleLoadDataEx):
// NUL-terminated or plain PTX text, which the driver JIT-compiles, or a
// cubin (an ELF image, passed as is). On failure the error includes the
// JIT's log.
func (c *Ctx) LoadModule(ptx []byte) (Module, error) {
	if len(ptx) == 0 {
		return 0, errors.New("cuModuleLoadDataEx: empty image")
	}
	img := ptx
	if img[len(img)-1] != 0 && !bytes.HasPrefix(img, []byte("\x7fELF")) {
		img = append(append(make([]byte, 0, len(ptx)+1), ptx...), 0)
	}
	const logSize = 16 << 10
	errLog := make([]byte, logSize)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSize}
	// Option values are void*; sizes are passed by value in the pointer.
	vals := []uintptr{uintptr(unsafe.Pointer(&errLog[0])), logSize}
	var m uintptr
	r := call(drv.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	if r != success {
		e := newError("cuModuleLoadDataEx", r)
		if msg := goString(unsafe.Pointer(&errLog[0])); msg != "" {
			return 0, fmt.Errorf("%w: %s", e, msg)
		}
		return 0, e
	}
	return Module(m), nil
}

// UnloadModule releases m.
func (c *Ctx) UnloadModule(m Module) error {
	if m == 0 {
		return nil
	}
	return check("cuModuleUnload", call(drv.cuModuleUnload, uintptr(m)))
}

// Function looks up a kernel by its (extern "C") name.
func (c *Ctx) Function(m Module, name string) (Function, error) {
	b := append([]byte(name), 0)
	var f uintptr
	if err := check("cuModuleGetFunction", call(drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&b[0])))); err != nil {
		return 0, fmt.Errorf("kernel %q: %w", name, err)
	}
	return Function(f), nil
}

// Function attributes settable with SetAttribute (CUfunction_attribute).
const (
	FuncMaxDynamicSharedMemory = 8
	// FuncPreferredSharedMemoryCarveout is
	// CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: the percentage
	// of the multiprocessor's unified L1 / shared memory the kernel
	// prefers as shared memory (a hint; 0: the most L1).
	FuncPreferredSharedMemoryCarveout = 9
)

// SetAttribute sets a kernel attribute, e.g. raising its dynamic shared
// memory limit above 48 KiB.
func (c *Ctx) SetAttribute(f Function, attr, value int) error {
	return check("cuFuncSetAttribute", call(drv.cuFuncSetAttribute, uintptr(f), uintptr(attr), uintptr(value)))
}

// MaxActiveBlocks is how many blocks of threads threads (and smem bytes
// of dynamic shared memory) of f one multiprocessor holds at once
// (cuOccupancyMaxActiveBlocksPerMultiprocessor): what f's registers,
// shared memory and block size allow, as compiled for this device.
func (c *Ctx) MaxActiveBlocks(f Function, threads, smem int) (int, error) {
	var n int32
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", call(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor,
		uintptr(unsafe.Pointer(&n)), uintptr(f), uintptr(threads), uintptr(smem))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// maxArgs is the most kernel parameters Args holds.
const maxArgs = 32

// Args packs kernel parameters in declaration order. Each value occupies
// one 8-byte slot, which the driver reads with the parameter's declared
// size (little-endian), so 4-byte parameters need no special layout. The
// zero value is empty; Args is reusable after Reset.
type Args struct {
	v   [maxArgs]uint64
	n   int
	err error
}

func (a *Args) put(v uint64) *Args {
	if a.n == maxArgs {
		a.err = fmt.Errorf("cuda: more than %d kernel arguments", maxArgs)
		return a
	}
	a.v[a.n] = v
	a.n++
	return a
}

// Reset empties a for reuse.
func (a *Args) Reset() *Args { a.n, a.err = 0, nil; return a }

// Len is the number of packed parameters.
func (a *Args) Len() int { return a.n }

// Ptr appends a device pointer parameter (T* in the kernel).
func (a *Args) Ptr(p DevPtr) *Args { return a.put(uint64(p)) }

// I32 appends an int parameter.
func (a *Args) I32(v int32) *Args { return a.put(uint64(uint32(v))) }

// Int appends an int parameter, rejecting values outside int32.
func (a *Args) Int(v int) *Args {
	if v < math.MinInt32 || v > math.MaxInt32 {
		a.err = fmt.Errorf("cuda: kernel argument %d overflows int32", v)
	}
	return a.put(uint64(uint32(int32(v))))
}

// U32 appends an unsigned int parameter.
func (a *Args) U32(v uint32) *Args { return a.put(uint64(v)) }

// I64 appends a long long parameter.
func (a *Args) I64(v int64) *Args { return a.put(uint64(v)) }

// U64 appends an unsigned long long (or size_t) parameter.
func (a *Args) U64(v uint64) *Args { return a.put(v) }

// F32 appends a float parameter.
func (a *Args) F32(v float32) *Args { return a.put(uint64(math.Float32bits(v))) }

// F64 appends a double parameter.
func (a *Args) F64(v float64) *Args { return a.put(math.Float64bits(v)) }

// Dim3 is a grid or block shape; zero components count as 1.
type Dim3 struct{ X, Y, Z uint32 }

func (d Dim3) norm() Dim3 {
	if d.X == 0 {
		d.X = 1
	}
	if d.Y == 0 {
		d.Y = 1
	}
	if d.Z == 0 {
		d.Z = 1
	}
	return d
}

// LaunchConfig is a kernel's grid, block and dynamic shared memory size,
// and whether it may overlap the kernel before it on the stream.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedMem   uint32
	// Overlap launches the kernel with programmatic stream serialization
	// (cuLaunchKernelEx, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	// compute capability 9.0): its blocks may start once every block of
	// the previous kernel on the stream has run griddepcontrol.launch_dependents
	// (or exited), instead of after that kernel completes. Why: a decode
	// step is hundreds of short dependent launches, and each one's launch
	// latency, ramp and tail leave the memory bus idle; with Overlap the
	// next kernel's blocks are already resident and can stream weights
	// that do not depend on the previous kernel. Only for kernels that
	// execute griddepcontrol.wait before they touch memory the previous
	// kernel reads or writes; ignored where the driver lacks
	// cuLaunchKernelEx. Stream capture keeps it as a programmatic edge.
	Overlap bool
}

// launchConfig is CUlaunchConfig (cuda.h, 56 bytes on 64-bit hosts).
type launchConfig struct {
	grid, block [3]uint32
	sharedMem   uint32
	_           uint32
	stream      uintptr
	attrs       uintptr
	numAttrs    uint32
	_           uint32
}

// launchAttr is CUlaunchAttribute: an id, padding and a 64-byte value union.
type launchAttr struct {
	id  uint32
	_   uint32
	val [64]byte
}

// attrProgrammaticStreamSerialization is
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const attrProgrammaticStreamSerialization = 6

// Launch enqueues f on s with the packed arguments (cuLaunchKernel, or
// cuLaunchKernelEx for cfg.Overlap). The argument values are copied by the
// driver before Launch returns, so a may be reused at once.
func (c *Ctx) Launch(f Function, cfg LaunchConfig, s Stream, a *Args) error {
	if a.err != nil {
		return a.err
	}
	if f == 0 {
		return errors.New("cuLaunchKernel: nil function")
	}
	copy(c.argVals[:a.n], a.v[:a.n])
	g, b := cfg.Grid.norm(), cfg.Block.norm()
	var params uintptr
	if a.n > 0 {
		params = uintptr(unsafe.Pointer(&c.argPtrs[0]))
	}
	if cfg.Overlap && drv.cuLaunchKernelEx != 0 {
		*c.lattr = launchAttr{id: attrProgrammaticStreamSerialization}
		c.lattr.val[0] = 1 // programmaticStreamSerializationAllowed (int)
		*c.lcfg = launchConfig{grid: [3]uint32{g.X, g.Y, g.Z}, block: [3]uint32{b.X, b.Y, b.Z}, sharedMem: cfg.SharedMem,
			stream: uintptr(s), attrs: uintptr(unsafe.Pointer(c.lattr)), numAttrs: 1}
		return check("cuLaunchKernelEx", call(drv.cuLaunchKernelEx, uintptr(unsafe.Pointer(c.lcfg)), uintptr(f), params, 0))
	}
	return check("cuLaunchKernel", call(drv.cuLaunchKernel, uintptr(f),
		uintptr(g.X), uintptr(g.Y), uintptr(g.Z), uintptr(b.X), uintptr(b.Y), uintptr(b.Z),
		uintptr(cfg.SharedMem), uintptr(s), params, 0))
}

// CanOverlap reports whether the driver offers LaunchConfig.Overlap
// (cuLaunchKernelEx); the device must also be of compute capability 9.0
// or newer for it to take effect.
func CanOverlap() bool { return drv.cuLaunchKernelEx != 0 }
