package kernels

import (
	"embed"
	"fmt"
	"sort"
	"strings"

	"github.com/strata-llm/strata/kernels/cuda"
)

//go:embed ptx/*.ptx
var ptxFS embed.FS

// families are the .cu files, each compiled to one module.
var families = []string{"attention", "bf16pack", "elementwise", "gemm", "gemv", "gemvq", "norm", "prefill", "rope", "sample"}

// PTXArch returns the PTX target used for a device of compute capability
// major.minor: "compute_80" from Ampere on (tensor-core mma.sync), else
// "compute_61" (Pascal and newer). Older devices are unsupported.
func PTXArch(major, minor int) (string, error) {
	switch {
	case major >= 8:
		return "compute_80", nil
	case major > 6 || (major == 6 && minor >= 1):
		return "compute_61", nil
	default:
		return "", fmt.Errorf("compute capability %d.%d is below 6.1: %w", major, minor, cuda.ErrUnavailable)
	}
}

// Kernels is the set of strata's kernels loaded into one device's context.
// Its methods enqueue launches and must be called inside Device.Do of that
// device.
type Kernels struct {
	// Arch is the PTX target that was loaded ("compute_80").
	Arch string
	// SMs is the device's multiprocessor count, used to size grids.
	SMs int

	mods     []cuda.Module
	fns      map[string]cuda.Function
	gemvSmem int // dynamic shared memory GEMV launches may use
	gemm     gemmState
	gemvq    gemvqState // quantized-x scratch of the integer GEMV path
}

// Load JIT-compiles the embedded PTX for c's device and resolves every
// kernel. The first load on a machine can take a few seconds (the driver
// caches the result).
func Load(c *cuda.Ctx) (*Kernels, error) {
	d := c.Device()
	arch, err := PTXArch(d.ComputeCapability())
	if err != nil {
		return nil, err
	}
	sms, err := d.AttributeOnThread(c, cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	k := &Kernels{Arch: arch, SMs: sms, fns: map[string]cuda.Function{}}
	for _, fam := range families {
		src, err := ptxFS.ReadFile("ptx/" + fam + "." + arch + ".ptx")
		if err != nil {
			k.Unload(c)
			return nil, fmt.Errorf("kernels: embedded PTX: %w", err)
		}
		m, err := c.LoadModule(src)
		if err != nil {
			k.Unload(c)
			return nil, fmt.Errorf("kernels: loading %s.%s: %w", fam, arch, err)
		}
		k.mods = append(k.mods, m)
		for _, name := range entryNames(src) {
			f, err := c.Function(m, name)
			if err != nil {
				k.Unload(c)
				return nil, fmt.Errorf("kernels: %s: %w", fam, err)
			}
			k.fns[name] = f
		}
	}
	k.gemvSmem = 48 << 10
	if arch == "compute_80" {
		for name, f := range k.fns {
			if strings.HasPrefix(name, "gemv_") || strings.HasPrefix(name, "gemvq_staged") {
				if err := c.SetAttribute(f, cuda.FuncMaxDynamicSharedMemory, gemvSharedLimit); err != nil {
					k.Unload(c)
					return nil, fmt.Errorf("kernels: %s: raising shared memory: %w", name, err)
				}
			}
		}
		k.gemvSmem = gemvSharedLimit
	}
	return k, nil
}

// entryNames lists the .entry symbols of a PTX module.
func entryNames(ptx []byte) []string {
	var names []string
	for _, line := range strings.Split(string(ptx), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, ".visible .entry "); ok {
			if i := strings.IndexByte(rest, '('); i > 0 {
				names = append(names, rest[:i])
			}
		}
	}
	return names
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
func (k *Kernels) Unload(c *cuda.Ctx) error {
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

func (k *Kernels) fn(name string) (cuda.Function, error) {
	f, ok := k.fns[name]
	if !ok {
		return 0, fmt.Errorf("kernels: no kernel %q in %s", name, k.Arch)
	}
	return f, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
