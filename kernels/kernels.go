package kernels

import (
	"embed"
	"fmt"
	"sort"
	"strings"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

//go:embed ptx/*.ptx ptx/*.cubin
var ptxFS embed.FS

// cubinArch is the one architecture with ahead-of-time code embedded
// (gen.sh: ptxas 11.8 on the compute_90 PTX), loaded instead of the PTX
// where Tuning.Cubin says so.
const cubinArch = "sm_90"

// families are the .cu files, each compiled to one module.
var families = []string{"attention", "bf16pack", "elementwise", "gemm", "gemv", "gemvq", "moe", "norm", "prefill", "rope", "sample"}

// PTXArch returns the PTX target used for a device of compute capability
// major.minor: "compute_90" from Hopper on (the compute_80 code plus
// griddepcontrol, for launches that overlap their predecessor:
// cudadrv.LaunchConfig.Overlap), "compute_80" on Ampere and Ada (tensor-core
// mma.sync), else "compute_61" (Pascal and newer). Older devices are
// unsupported.
func PTXArch(major, minor int) (string, error) {
	switch {
	case major >= 9:
		return "compute_90", nil
	case major >= 8:
		return "compute_80", nil
	case major > 6 || (major == 6 && minor >= 1):
		return "compute_61", nil
	default:
		return "", fmt.Errorf("compute capability %d.%d is below 6.1: %w", major, minor, cudadrv.ErrUnavailable)
	}
}

// Kernels is the set of strata's kernels loaded into one device's context,
// with the Tuning its launches follow. Its methods enqueue launches and
// must be called inside Device.Do of that device. Views of one load with
// another tuning (WithTuning) share its modules and scratch buffers. The
// load's Arch, Image and SMs are fields of every view.
type Kernels struct {
	*loaded
	tune Tuning
	// readOnlySink, while set, turns this view's integer GEMV launches
	// into read_xor launches (SetGEMVReadOnly).
	readOnlySink cudadrv.DevPtr
}

// loaded is what Load makes: the modules, the device's figures and the
// per-stream scratch buffers, shared by every view of the load.
type loaded struct {
	// Arch is the PTX target that was loaded ("compute_80").
	Arch string
	// Image says what the driver loaded for Arch: "compute_90 PTX (driver
	// JIT)" or "sm_90 cubin (ptxas 11.8)".
	Image string
	// SMs is the device's multiprocessor count, used to size grids.
	SMs int

	mods  []cudadrv.Module
	fns   map[string]cudadrv.Function
	waits map[cudadrv.Function]bool // kernels that run griddepcontrol.wait (launched with Overlap)
	// xqReaders are the integer GEMVs, which read the quantized x and
	// never write it: Kernels.run keeps a held x across them (gemvqLaunch
	// drops it where their outputs overlap the x it came from).
	xqReaders map[cudadrv.Function]bool
	gemvSmem  int // dynamic shared memory GEMV launches may use
	// u2PerSM is the driver's count of gemvq_fused_u2_1 blocks a
	// multiprocessor holds (0: unknown; see u2BlocksPerSM).
	u2PerSM int
	// p4PerSM, p2PerSM: the same for gemvq_p4_1 (64 threads) and
	// gemvq_p2u2_1 (32 threads), ps6PerSM and mixedSPerSM for
	// gemvq_ps6_1 and gemvq_mixed_s_1 (64 threads); see gemvqPairGeometry
	// and gemvqMixedSplitGeometry.
	p4PerSM, p2PerSM, ps6PerSM, mixedSPerSM int
	// q6aR2PerSM: the same for gemvq_q6ka_r2u2_1 (32 threads; see
	// gemvq6aWaveGeometry).
	q6aR2PerSM int
	// skPerSM: the same for GEMVSliced's kernels (gemvSKThreads threads;
	// see gemvSKGeometry), by name.
	skPerSM map[string]int
	gemm    gemmState
	gemvq   gemvqState // quantized-x scratch of the integer GEMV path
}

// Load loads the embedded kernels for c's device with the device's tuning
// (TuningFor) changed by the named variants (Tuning.WithVariant, in
// order): the sm_90 cubins where Tuning.Cubin says so, else the PTX, which
// the driver JIT-compiles (the first load on a machine can take several
// seconds; the driver caches the result); and resolves every kernel.
func Load(c *cudadrv.Ctx, variants ...string) (*Kernels, error) {
	d := c.Device()
	maj, min := d.ComputeCapability()
	arch, err := PTXArch(maj, min)
	if err != nil {
		return nil, err
	}
	sms, err := d.AttributeOnThread(c, cudadrv.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	tune, err := TuningFor(DeviceInfo{Major: maj, Minor: min, SMs: sms}).WithVariants(variants...)
	if err != nil {
		return nil, err
	}
	cubin := tune.Cubin && maj == 9 && min == 0
	tune.Cubin = cubin
	image := arch + " PTX (driver JIT)"
	if cubin {
		image = cubinArch + " cubin (ptxas 11.8)"
	}
	k := &Kernels{tune: tune, loaded: &loaded{Arch: arch, Image: image, SMs: sms, fns: map[string]cudadrv.Function{}, waits: map[cudadrv.Function]bool{}, xqReaders: map[cudadrv.Function]bool{}}}
	for _, fam := range families {
		src, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
		if err != nil {
			k.Unload(c)
			return nil, fmt.Errorf("kernels: embedded PTX: %w", err)
		}
		img, what := src, fam+"."+arch
		if cubin {
			what = fam + "." + cubinArch
			if img, err = ptxFS.ReadFile("ptx/" + what + ".cubin"); err != nil {
				k.Unload(c)
				return nil, fmt.Errorf("kernels: embedded cubin: %w", err)
			}
		}
		m, err := c.LoadModule(img)
		if err != nil {
			k.Unload(c)
			return nil, fmt.Errorf("kernels: loading %s: %w", what, err)
		}
		k.mods = append(k.mods, m)
		for _, e := range entries(src) {
			f, err := c.Function(m, e.name)
			if err != nil {
				k.Unload(c)
				return nil, fmt.Errorf("kernels: %s: %w", fam, err)
			}
			k.fns[e.name] = f
			if e.waits {
				k.waits[f] = true
			}
			// Every integer GEMV that reads the scratch; gemvq_x writes it,
			// and GEMVSliced's gemvq_sk_* quantize their own x (a launch of
			// theirs drops the held x: their output may overlap its floats).
			// moe_stage writes only its slots and table, between a norm and
			// the picked kernels that read the norm's x.
			if strings.HasPrefix(e.name, "gemvq_") && e.name != "gemvq_x" && !strings.HasPrefix(e.name, "gemvq_sk_") || e.name == "moe_stage" {
				k.xqReaders[f] = true
			}
		}
	}
	k.gemvSmem = 48 << 10
	if k.mma() {
		for name, f := range k.fns {
			if strings.HasPrefix(name, "gemv_") || strings.HasPrefix(name, "gemvq_q6k_s_") {
				if err := c.SetAttribute(f, cudadrv.FuncMaxDynamicSharedMemory, gemvSharedLimit); err != nil {
					k.Unload(c)
					return nil, fmt.Errorf("kernels: %s: raising shared memory: %w", name, err)
				}
			}
		}
		k.gemvSmem = gemvSharedLimit
		for _, name := range maxL1Kernels {
			if f, ok := k.fns[name]; ok {
				// A hint: where the driver refuses it the kernel runs with
				// its default split.
				_ = c.SetAttribute(f, cudadrv.FuncPreferredSharedMemoryCarveout, 0)
			}
		}
	}
	// A failed query keeps the sm_90 cubin's figure (the *BlocksPerSMDefault
	// constants): the choices these feed are speed ones, never correctness
	// ones.
	for _, q := range []struct {
		name    string
		threads int
		n       *int
	}{{"gemvq_fused_u2_1", gemvqU2Threads, &k.u2PerSM}, {"gemvq_p4_1", 64, &k.p4PerSM}, {"gemvq_p2u2_1", 32, &k.p2PerSM},
		{"gemvq_q6ka_r2u2_1", 32, &k.q6aR2PerSM}, {"gemvq_ps6_1", 64, &k.ps6PerSM},
		{"gemvq_mixed_s_1", 64, &k.mixedSPerSM}} {
		if f, ok := k.fns[q.name]; ok {
			if n, err := c.MaxActiveBlocks(f, q.threads, 0); err == nil && n > 0 {
				*q.n = n
			}
		}
	}
	k.skPerSM = map[string]int{}
	for _, name := range []string{"gemvq_sk_p", "gemvq_sk_q6ka"} {
		if f, ok := k.fns[name]; ok {
			if n, err := c.MaxActiveBlocks(f, gemvSKThreads, 0); err == nil && n > 0 {
				k.skPerSM[name] = n
			}
		}
	}
	return k, nil
}

// maxL1Kernels prefer the largest L1 (the least shared memory) of the
// multiprocessor's unified L1 / shared memory: o's and the output
// projection's integer GEMVs, which use no shared memory and stream
// weights that every block reads once. The same preference for the other
// decode kernels, or a preference for shared memory, made the decode step
// slower, so the list holds only the two kernels it helps.
var maxL1Kernels = []string{"gemvq_p4_1", "gemvq_q6ka_1"}

// mma reports whether the loaded PTX targets tensor-core mma.sync
// (compute_80 and compute_90).
func (k *Kernels) mma() bool { return k.Arch != "compute_61" }

// entry is a kernel of a PTX module and whether its body executes
// griddepcontrol.wait.
type entry struct {
	name  string
	waits bool
}

// entries lists the .entry symbols of a PTX module, in order. A kernel
// whose body holds griddepcontrol.wait waits for its predecessor before
// touching dependent memory, so the launchers may let it overlap that
// predecessor (cudadrv.LaunchConfig.Overlap); any other kernel is launched
// plainly. Reading this from the PTX keeps the two from disagreeing.
func entries(ptx []byte) []entry {
	var es []entry
	for _, line := range strings.Split(string(ptx), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, ".visible .entry "); ok {
			if i := strings.IndexByte(rest, '('); i > 0 {
				es = append(es, entry{name: rest[:i]})
			}
		} else if len(es) > 0 && strings.HasPrefix(line, "griddepcontrol.wait") {
			es[len(es)-1].waits = true
		}
	}
	return es
}

// entryNames lists the .entry symbols of a PTX module.
func entryNames(ptx []byte) []string {
	var names []string
	for _, e := range entries(ptx) {
		names = append(names, e.name)
	}
	return names
}

// Tuning returns the tuning k's launches follow.
func (k *Kernels) Tuning() Tuning { return k.tune }

// WithTuning returns a view of k's load whose launches follow t: the same
// modules, device figures and scratch buffers, used inside Device.Do of
// k's device like k; the load is unloaded once, through k or any view. The
// loaded image cannot change after Load: t.Cubin is kept as k's.
func (k *Kernels) WithTuning(t Tuning) *Kernels {
	t.Cubin = k.tune.Cubin
	return &Kernels{loaded: k.loaded, tune: t}
}

// run launches f with cfg on s, letting it overlap its predecessor when
// its PTX waits for it (entries) and the tuning allows (Tuning.Overlap).
func (k *Kernels) run(c *cudadrv.Ctx, f cudadrv.Function, cfg cudadrv.LaunchConfig, s cudadrv.Stream, a *cudadrv.Args) error {
	cfg.Overlap = k.waits[f] && k.tune.Overlap
	// Any launch but an integer GEMV's may rewrite the x a norm left
	// quantized in s's scratch (RMSNormQ), or the scratch itself.
	if w, ok := k.gemvq.ws[s]; ok && w.held != 0 && !k.xqReaders[f] {
		w.held = 0
		k.gemvq.ws[s] = w
	}
	return c.Launch(f, cfg, s, a)
}

// Names lists the loaded kernels, sorted.
func (k *Kernels) Names() []string {
	var n []string
	for name := range k.fns {
		n = append(n, name)
	}
	sort.Strings(n)
	return n
}

// Unload releases the modules.
func (k *Kernels) Unload(c *cudadrv.Ctx) error {
	first := k.gemm.free(c)
	if err := k.gemvq.free(c); err != nil && first == nil {
		first = err
	}
	for _, m := range k.mods {
		if err := c.UnloadModule(m); err != nil && first == nil {
			first = err
		}
	}
	k.mods = nil
	return first
}

func (k *Kernels) fn(name string) (cudadrv.Function, error) {
	f, ok := k.fns[name]
	if !ok {
		return 0, fmt.Errorf("kernels: no kernel %q in %s", name, k.Arch)
	}
	return f, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
