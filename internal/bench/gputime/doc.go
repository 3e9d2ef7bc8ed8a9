// Package gputime is the GPU benchmarks' timing library: device ceilings
// (copy bandwidth, the Device.Do hand-off), decode and prefill timing of
// an engine/gpu Model, and the profile of a resident decode step (its
// kernels, its matrix products alone and by kind, their read-only
// ceiling, the host's launch costs). `strata bench engine`
// (internal/bench/enginebench) and engine/gpu's Go benchmarks time the GPU through
// it, so the figures both print come from the same code.
//
// The engine measures nothing itself: it reports where a Forward pass has
// got to through its trace hook (gpu.Tracer, installed only while a
// decode is timed) and lends its decode step's pieces through
// gpu.StepProbe; every clock read, event and average is here. Device-side
// costs are timed with CUDA events on one stream, what a caller waits for
// with the host clock. None of the functions is meant to run concurrently
// with other passes of the same Model: they change its graph setting for
// their duration and time the device as if alone on it.
package gputime
