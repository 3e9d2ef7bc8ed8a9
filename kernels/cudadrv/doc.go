// Package cudadrv is strata's binding to the CUDA driver API (libcuda.so.1),
// loaded at run time with purego so that every strata binary builds with
// CGO_ENABLED=0 and still runs on hosts without a GPU: there, Load and Open
// return an error wrapping ErrUnavailable ("CUDA unavailable: …") instead of
// failing to start.
//
// The driver binds a context to an OS thread, so a Device owns one goroutine
// locked to its thread for its whole life; every driver call for the device
// runs there. Device.Do marshals a function onto that goroutine and hands it a
// *Ctx, whose methods call the driver directly: a sequence of calls (a decode
// step's launches, a graph capture) costs one hand-off, not one per call.
// All unsafe code and all foreign calls of strata's CUDA path live in this
// package; callers see typed handles (DevPtr, Stream, Event, Function, …),
// typed kernel arguments (Args) and typed errors (*Error carries the
// CUresult and its name from cuGetErrorName).
package cudadrv
