package cudadrv

import (
	"errors"
	"fmt"
	"unsafe"
)

// Result is a CUresult, the status every driver call returns.
type Result int32

// CUresult values strata tests for by number (cuda.h).
const (
	success                 Result = 0
	ResultInvalidValue      Result = 1
	ResultOutOfMemory       Result = 2
	ResultNotInitialized    Result = 3
	ResultNoDevice          Result = 100
	ResultInvalidDevice     Result = 101
	ResultInvalidPTX        Result = 218
	ResultNotFound          Result = 500
	ResultNotReady          Result = 600
	ResultIllegalAddress    Result = 700
	ResultLaunchOutOfRes    Result = 701
	ResultHostMemRegistered Result = 712
	ResultNotSupported      Result = 801
)

// Error is a failed driver call: the entry point, the CUresult and its
// name and description as the driver reports them (cuGetErrorName,
// cuGetErrorString).
type Error struct {
	Op   string
	Code Result
	Name string
	Desc string
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%d): %s", e.Op, e.Name, int(e.Code), e.Desc)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, int(e.Code))
}

// Is matches another *Error with the same Code (Op and names ignored), so
// errors.Is(err, &cuda.Error{Code: cuda.ResultOutOfMemory}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// IsCode reports whether err is, or wraps, a driver error with code c.
func IsCode(err error, c Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == c
}

func newError(op string, r Result) *Error {
	e := &Error{Op: op, Code: r, Name: fmt.Sprintf("CUDA_ERROR_%d", int(r))}
	if drv.cuGetErrorName != 0 {
		var p unsafe.Pointer
		if call(drv.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&p))) == success && p != nil {
			e.Name = goString(p)
		}
		var d unsafe.Pointer
		if call(drv.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&d))) == success && d != nil {
			e.Desc = goString(d)
		}
	}
	return e
}

// check turns a CUresult into nil or an *Error.
func check(op string, r Result) error {
	if r == success {
		return nil
	}
	return newError(op, r)
}
