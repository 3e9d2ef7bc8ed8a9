package gpu

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/synth"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

var (
	gpuOnce sync.Once
	gpuDev  *cudadrv.Device
	gpuK    *kernels.Kernels
	gpuErr  error
	gpuLoad time.Duration
)

// gpu returns the test device and its kernels (loaded once per process:
// the PTX JIT takes seconds on a fresh machine), or skips the test with
// the reason CUDA is not usable here (CI has no GPU).
func gpu(t testing.TB) (*cudadrv.Device, *kernels.Kernels) {
	t.Helper()
	gpuOnce.Do(func() {
		gpuDev, gpuErr = cudadrv.Open(0)
		if gpuErr != nil {
			return
		}
		start := time.Now()
		// The decode GEMVs run on kernels' integer path for Q4_K and Q6_K
		// (the device's tuning); STRATA_FAST_GEMV=0 runs every GPU test and
		// benchmark of this package on the float path (the tuning variant
		// float-gemv), =1 with Q6_K alone on it (float-q6k).
		var variants []string
		switch os.Getenv("STRATA_FAST_GEMV") {
		case "0":
			variants = []string{"float-gemv"}
		case "1":
			variants = []string{"float-q6k"}
		}
		gpuErr = gpuDev.Do(func(c *cudadrv.Ctx) error {
			var err error
			gpuK, err = kernels.Load(c, variants...)
			return err
		})
		gpuLoad = time.Since(start)
	})
	if gpuErr != nil {
		if errors.Is(gpuErr, cudadrv.ErrUnavailable) {
			t.Skipf("skipping GPU test: %v", gpuErr)
		}
		t.Fatalf("GPU setup: %v", gpuErr)
	}
	return gpuDev, gpuK
}

// gpuFamilies are the synth catalogue families the GPU tests compare with
// the CPU: every architecture the CUDA backend runs (mistral is a llama
// file with a head size that is not dim/heads and a sliding window at
// every layer).
var gpuFamilies = []string{"llama", "gemma2", "gemma3", "mistral", "phi3", "qwen2", "qwen3"}

// tinyModel writes a tiny synthetic model and opens it on the CPU.
func tinyModel(t testing.TB, arch, typ string) *model.Model {
	t.Helper()
	return shapeModel(t, arch, "tiny", typ)
}

// shapeModel writes a synthetic model of the catalogue's shape and opens
// it on the CPU.
func shapeModel(t testing.TB, arch, shape, typ string) *model.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), arch+"-"+shape+"-"+typ+".gguf")
	if err := synth.Write(path, synth.Options{Arch: arch, Shape: shape, Type: typ, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// loadGPU uploads cpu's weights to the test device.
func loadGPU(t testing.TB, cpu *model.Model, opts Options) *Model {
	t.Helper()
	dev, k := gpu(t)
	opts.Kernels = k
	g, err := Load(dev, cpu.Config, cpu.Weights, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// promptTokens is a deterministic prompt of n ids in [1, vocab).
func promptTokens(vocab, n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + (i*131+seed*17+7)%(vocab-1))
	}
	return p
}

// maxNMSE is the GPU backend's fidelity bound: GPU logits vs the CPU
// reference.
const maxNMSE = 1e-4

// openBig opens the synthetic model bigModel names, skipping as bigModel
// does and where there is no GPU (gpu), and closes it when the test ends.
// dev is the GPU.
func openBig(t testing.TB, env, shape string) (*model.Model, *cudadrv.Device) {
	t.Helper()
	path := bigModel(t, env, shape)
	dev, _ := gpu(t)
	m, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, dev
}

// bigModel returns the path in env (skipping the test when it is unset),
// writing the synthetic llama model of the given shape (Q4_K_M, seed 1)
// there first when the file does not exist yet: the GPU machine has no Go
// toolchain, so the test binary synthesizes its own fixtures.
func bigModel(t testing.TB, env, shape string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Skipf("skipping %s test: %s is not set (path of a synthetic llama %s q4_k_m GGUF, written there if missing)", shape, env, shape)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		start := time.Now()
		if err := synth.Write(path, synth.Options{Arch: "llama", Shape: shape, Type: "q4_k_m", Seed: 1}); err != nil {
			t.Fatal(err)
		}
		t.Logf("synthesized %s in %v", path, time.Since(start).Round(time.Millisecond))
	}
	return path
}
