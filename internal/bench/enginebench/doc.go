// Package enginebench is `strata bench engine`: it measures strata's GPU
// engine (engine/gpu) on a fixed set of model shapes and placements, in
// one run — first the ceilings (device-to-device copy bandwidth, pinned
// host-to-device peak), then each scenario — and relates every figure to
// a ceiling measured in that same run, to another figure of the run, or,
// when the run is given a peers file (Options.Peers), to another system's
// reference figure, next to the goal set for that ratio. It writes the
// synthetic models a scenario needs when they are missing (internal/synth,
// and a prefab pool for the INT8-row variant).
//
// The timing itself lives in internal/bench/gputime, which engine/gpu's Go
// benchmarks share; the placements come from the tier planner
// (engine/tier) as `--vram` would plan them. This package holds no unsafe
// code and prints nothing: progress goes to Options.Progress and the
// Report renders itself (WriteText) or marshals as JSON.
package enginebench
