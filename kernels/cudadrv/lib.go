package cudadrv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable is wrapped by every error that means "no usable CUDA
// here": no driver library, a driver too old for a needed entry point, no
// device, or a driver that fails to initialise. Callers fall back to the CPU
// backend on errors.Is(err, ErrUnavailable).
var ErrUnavailable = errors.New("CUDA unavailable")

// unavailableError carries the reason CUDA cannot be used; it prints as
// "CUDA unavailable: <reason>" and matches ErrUnavailable.
type unavailableError struct{ reason string }

func (e *unavailableError) Error() string        { return "CUDA unavailable: " + e.reason }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

func unavailable(format string, args ...any) error {
	return &unavailableError{reason: fmt.Sprintf(format, args...)}
}

// driver holds the resolved entry points. Names with a _v2 (or later)
// suffix are the ABI the current cuda.h maps the plain names to.
type driver struct {
	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute        uintptr
	cuDeviceTotalMem                                                            uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease                         uintptr
	cuCtxSetCurrent, cuCtxSynchronize                                           uintptr
	cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemsetD8Async, cuMemsetD32Async      uintptr
	cuMemHostAlloc, cuMemFreeHost, cuMemHostRegister, cuMemHostUnregister       uintptr
	cuMemHostGetDevicePointer                                                   uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                     uintptr
	cuMemcpy2DAsync                                                             uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent     uintptr
	cuStreamQuery                                                               uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventSynchronize            uintptr
	cuEventElapsedTime, cuEventQuery                                            uintptr
	cuModuleLoadDataEx, cuModuleUnload, cuModuleGetFunction, cuFuncSetAttribute uintptr
	cuOccupancyMaxActiveBlocksPerMultiprocessor                                 uintptr
	cuLaunchKernel                                                              uintptr
	cuLaunchKernelEx                                                            uintptr // optional: CUDA 11.8+
	cuStreamWaitValue32, cuStreamWriteValue32                                   uintptr // optional: CUDA 11.7+
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch uintptr
	cuGraphDestroy, cuGraphExecDestroy, cuGraphGetNodes                         uintptr
	cuMemGetHandleForAddressRange                                               uintptr
}

var (
	loadOnce sync.Once
	loadErr  error
	drv      driver
)

// libraryPaths are tried in order; dlopen of the bare soname honours
// LD_LIBRARY_PATH and the loader cache, the others cover hosts (containers)
// where the driver sits in a directory neither names.
var libraryPaths = []string{
	"libcuda.so.1",
	"/usr/local/nvidia/lib64/libcuda.so.1",
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
	"/usr/lib64/libcuda.so.1",
}

// Load opens libcuda.so.1, resolves the entry points strata uses and
// initialises the driver. It is safe to call many times; the first result
// is kept. Errors wrap ErrUnavailable.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	if runtime.GOOS != "linux" {
		return unavailable("the CUDA binding supports linux only (this is %s)", runtime.GOOS)
	}
	if p := os.Getenv("STRATA_LIBCUDA"); p != "" {
		libraryPaths = append([]string{filepath.Clean(p)}, libraryPaths...)
	}
	h, err := openLibrary(libraryPaths)
	if err != nil {
		return err
	}
	syms := []struct {
		dst  *uintptr
		name string
	}{
		{&drv.cuInit, "cuInit"},
		{&drv.cuDriverGetVersion, "cuDriverGetVersion"},
		{&drv.cuGetErrorName, "cuGetErrorName"},
		{&drv.cuGetErrorString, "cuGetErrorString"},
		{&drv.cuDeviceGetCount, "cuDeviceGetCount"},
		{&drv.cuDeviceGet, "cuDeviceGet"},
		{&drv.cuDeviceGetName, "cuDeviceGetName"},
		{&drv.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&drv.cuDeviceTotalMem, "cuDeviceTotalMem_v2"},
		{&drv.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&drv.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&drv.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&drv.cuCtxSynchronize, "cuCtxSynchronize"},
		{&drv.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&drv.cuMemAlloc, "cuMemAlloc_v2"},
		{&drv.cuMemFree, "cuMemFree_v2"},
		{&drv.cuMemsetD8Async, "cuMemsetD8Async"},
		{&drv.cuMemsetD32Async, "cuMemsetD32Async"},
		{&drv.cuMemHostAlloc, "cuMemHostAlloc"},
		{&drv.cuMemFreeHost, "cuMemFreeHost"},
		{&drv.cuMemHostRegister, "cuMemHostRegister_v2"},
		{&drv.cuMemHostUnregister, "cuMemHostUnregister"},
		{&drv.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"},
		{&drv.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&drv.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&drv.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&drv.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2"},
		{&drv.cuStreamCreate, "cuStreamCreate"},
		{&drv.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&drv.cuStreamSynchronize, "cuStreamSynchronize"},
		{&drv.cuStreamWaitEvent, "cuStreamWaitEvent"},
		{&drv.cuStreamQuery, "cuStreamQuery"},
		{&drv.cuEventCreate, "cuEventCreate"},
		{&drv.cuEventDestroy, "cuEventDestroy_v2"},
		{&drv.cuEventRecord, "cuEventRecord"},
		{&drv.cuEventSynchronize, "cuEventSynchronize"},
		{&drv.cuEventElapsedTime, "cuEventElapsedTime"},
		{&drv.cuEventQuery, "cuEventQuery"},
		{&drv.cuModuleLoadDataEx, "cuModuleLoadDataEx"},
		{&drv.cuModuleUnload, "cuModuleUnload"},
		{&drv.cuModuleGetFunction, "cuModuleGetFunction"},
		{&drv.cuFuncSetAttribute, "cuFuncSetAttribute"},
		{&drv.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"},
		{&drv.cuLaunchKernel, "cuLaunchKernel"},
		{&drv.cuStreamBeginCapture, "cuStreamBeginCapture_v2"},
		{&drv.cuStreamEndCapture, "cuStreamEndCapture"},
		{&drv.cuGraphInstantiate, "cuGraphInstantiateWithFlags"},
		{&drv.cuGraphLaunch, "cuGraphLaunch"},
		{&drv.cuGraphDestroy, "cuGraphDestroy"},
		{&drv.cuGraphExecDestroy, "cuGraphExecDestroy"},
		{&drv.cuGraphGetNodes, "cuGraphGetNodes"},
		{&drv.cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange"},
	}
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return unavailable("driver lacks %s (too old?): %v", s.name, err)
		}
		*s.dst = p
	}
	// Optional entry points: without them the features that use them are
	// off (LaunchConfig.Overlap launches plainly).
	if p, err := purego.Dlsym(h, "cuLaunchKernelEx"); err == nil {
		drv.cuLaunchKernelEx = p
	}
	// The stream memory operations' _v2 ABI, always enabled (the first
	// one needed a kernel module parameter): without them CanSignal is
	// false.
	if p, err := purego.Dlsym(h, "cuStreamWaitValue32_v2"); err == nil {
		if q, err := purego.Dlsym(h, "cuStreamWriteValue32_v2"); err == nil {
			drv.cuStreamWaitValue32, drv.cuStreamWriteValue32 = p, q
		}
	}
	if r := call(drv.cuInit, 0); r != success {
		return unavailable("%v", newError("cuInit", r))
	}
	return nil
}

// openLibrary dlopens the first path that loads; failure wraps
// ErrUnavailable with the first path's loader message.
func openLibrary(paths []string) (uintptr, error) {
	var firstErr error
	for _, p := range paths {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil && h != 0 {
			return h, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return 0, unavailable("loading libcuda.so.1: %v", firstErr)
}

// call invokes a driver entry point. Pointer arguments are passed as
// uintptr(unsafe.Pointer(p)) in the call expression; uintptrescapes moves
// their targets to the heap and keeps them alive for the call, exactly as
// for syscall.Syscall.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

// goString copies a NUL-terminated C string the driver owns.
func goString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 && n < 4096 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// DriverVersion reports the driver's CUDA version as 1000*major + 10*minor
// (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v int32
	if r := call(drv.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))); r != success {
		return 0, newError("cuDriverGetVersion", r)
	}
	return int(v), nil
}

// DeviceCount reports the number of CUDA devices. Zero devices is not an
// error here; Open reports it as ErrUnavailable.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n int32
	if r := call(drv.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))); r != success {
		return 0, newError("cuDeviceGetCount", r)
	}
	return int(n), nil
}
