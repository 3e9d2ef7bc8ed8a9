package kernels

import (
	"fmt"
	"sort"
	"strings"
)

// DeviceInfo is what TuningFor reads of a device.
type DeviceInfo struct {
	// Major and Minor are the compute capability.
	Major, Minor int
	// SMs is the multiprocessor count.
	SMs int
}

// Tuning is the kernel choices of one loaded Kernels: which image Load
// takes and which of the launch paths that compute the same products a
// launch uses. It is a value, chosen once per device by TuningFor and
// changed only by named variants (WithVariant), so two devices of one
// process can differ and every Kernels view (Kernels.WithTuning) carries
// its own. Launch geometry that depends on a matrix's shape (rows a
// block, one-wave rules, the kernel that serves a shape) is not a field:
// the launchers derive it from the shape and the device's figures at each
// launch.
type Tuning struct {
	// Cubin loads the ahead-of-time sm_90 cubins (ptxas 11.8, gen.sh)
	// instead of the compute_90 PTX: on a device of exactly compute
	// capability 9.0. ptxas 11.8's code for the integer decode GEMVs
	// streams faster than what newer drivers' JIT makes of the same PTX,
	// and a cubin loads in milliseconds where a cold JIT takes seconds.
	// Other devices get the PTX of their generation (PTXArch).
	Cubin bool
	// Overlap launches the kernels whose PTX waits for its predecessor
	// (griddepcontrol.wait, compute_90) with programmatic dependent launch
	// (cudadrv.LaunchConfig.Overlap), so a decode kernel's prologue and
	// weight loads run under its predecessor's tail. Results do not depend
	// on it. Chosen on compute capability 9.0 and above, the only devices
	// whose PTX carries the wait.
	Overlap bool
	// IntegerGEMV takes Q4_K decode GEMVs (GEMV, GEMVFused, GEMVGLU,
	// GEMVSliced) to gemvq.cu's integer path: x quantized to 16 bits per
	// 64-element block, dp4a dot products, about two SASS instructions a
	// weight where the float path needs five. The float path (gemv.cu)
	// serves every shape the integer one cannot and is the reference it is
	// checked against.
	IntegerGEMV bool
	// IntegerQ6K extends the integer path to Q6_K and Q6KA matrices while
	// IntegerGEMV is set.
	IntegerQ6K bool

	// The fields below force what the launchers would otherwise choose
	// by shape; only this package's tests and sweep benchmarks set them,
	// to run every kernel on the same shapes.

	// unroll forces the units each lane of gemvq_fused has in flight for
	// one vector: 1 (gemvq_fused_1) or 2 (gemvq_fused_u2_1); 0 lets
	// gemvq4Geometry choose, and lets the pair-unit, one-wave Q6KA and
	// split kernels take their launches.
	unroll int
	// warps, when positive, forces the integer GEMVs' warps per block.
	warps int
	// gemvWarpsPerSM is the resident warps per multiprocessor the float
	// GEMV launchers aim their grids at.
	gemvWarpsPerSM int
	// gemvStaged sizes the float path's staged direct plan.
	gemvStaged gemvStagedConfig
	// prefill and gemm are the prefill attention's and the GEMM path's
	// dispatch knobs.
	prefill prefillTuning
	gemm    gemmTuning
	// decodeBlocksPerSM is the blocks per multiprocessor decode
	// attention's key splits aim its grid at (DecodeSplits): each block
	// walks its keys a few rows in flight per warp, so a long span in few
	// blocks waits on memory rather than reading it.
	decodeBlocksPerSM int
	// decodeLong replaces decodeBlocksPerSM for a launch whose (token,
	// head) pairs alone do not give each multiprocessor a block (one
	// token's decode) once its span reaches decodeLong.span keys: there
	// more, shorter splits keep more loads in flight, where at shorter
	// spans the combine's cost outweighs them and with more tokens the
	// grid is wide already (BenchmarkAttentionDecode).
	decodeLong decodeLongTuning
}

// decodeLongTuning is decode attention's aim for one token's long span.
type decodeLongTuning struct {
	span, blocksPerSM int
}

// TuningFor is the tuning of a device: the ahead-of-time cubins where they
// fit it exactly, programmatic dependent launch where its PTX waits for
// predecessors, and the integer decode GEMVs (dp4a, which every supported
// device has).
func TuningFor(d DeviceInfo) Tuning {
	t := baseTuning()
	t.Cubin = d.Major == 9 && d.Minor == 0
	t.Overlap = d.Major >= 9
	return t
}

// baseTuning is every device's tuning but the fields TuningFor sets by
// device.
func baseTuning() Tuning {
	return Tuning{
		IntegerGEMV:       true,
		IntegerQ6K:        true,
		gemvWarpsPerSM:    32,
		gemvStaged:        gemvStagedConfig{warps: 8, blocksPerSM: 2},
		prefill:           prefillTuning{pairMaxWaves: 2},
		decodeBlocksPerSM: 2,
		decodeLong:        decodeLongTuning{span: 2048, blocksPerSM: 8},
		gemm:              gemmTuning{panelBytes: 128 << 20, xBytes: 32 << 20},
	}
}

// Variant is a named change to a device's tuning, for comparisons (strata
// bench engine --variant).
type Variant struct {
	// Name is what WithVariant takes.
	Name string
	// What says what the variant changes.
	What string

	apply func(*Tuning)
}

var variants = []Variant{
	{Name: "jit", What: "load the PTX through the driver's JIT even where the sm_90 cubins fit the device",
		apply: func(t *Tuning) { t.Cubin = false }},
	{Name: "no-overlap", What: "launch every kernel after its predecessor has finished (no programmatic dependent launch)",
		apply: func(t *Tuning) { t.Overlap = false }},
	{Name: "float-gemv", What: "decode GEMVs of Q4_K and Q6_K matrices on the float path (dequantize and FMA) instead of the integer one",
		apply: func(t *Tuning) { t.IntegerGEMV, t.IntegerQ6K = false, false }},
	{Name: "float-q6k", What: "decode GEMVs of Q6_K matrices on the float path, Q4_K ones on the integer path",
		apply: func(t *Tuning) { t.IntegerQ6K = false }},
}

// Variants lists the names WithVariant takes, sorted, with what each does.
func Variants() []Variant {
	vs := append([]Variant(nil), variants...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
	return vs
}

// WithVariant returns t changed as the variant name says (Variants).
func (t Tuning) WithVariant(name string) (Tuning, error) {
	for _, v := range variants {
		if v.Name == name {
			v.apply(&t)
			return t, nil
		}
	}
	names := make([]string, 0, len(variants))
	for _, v := range Variants() {
		names = append(names, v.Name)
	}
	return t, fmt.Errorf("kernels: no tuning variant %q (have %s)", name, strings.Join(names, ", "))
}

// WithVariants applies the variants named in order (WithVariant).
func (t Tuning) WithVariants(names ...string) (Tuning, error) {
	for _, n := range names {
		var err error
		if t, err = t.WithVariant(n); err != nil {
			return t, err
		}
	}
	return t, nil
}
