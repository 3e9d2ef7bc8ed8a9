package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/strata-llm/strata/engine/model"
)

// Backend names, as Options.Backend, the --backend flags and status use
// them.
const (
	// BackendAuto runs on the GPU when a CUDA device is usable and on the
	// CPU otherwise (the reason is kept in BackendInfo.Reason).
	BackendAuto = "auto"
	// BackendCPU is the pure-Go reference engine (engine/model), with the
	// streaming pipeline of engine/stream for layers that do not fit.
	BackendCPU = "cpu"
	// BackendCUDA is engine/gpu on GPU 0: tier A in device memory, tier B
	// in pinned host memory copied over PCIe every pass (bf16 matrices
	// losslessly packed), tier C read from a pool into pinned staging and
	// copied every pass.
	BackendCUDA = "cuda"
)

// ParseBackend checks a backend name from a flag or request: "" means
// BackendAuto.
func ParseBackend(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", BackendAuto:
		return BackendAuto, nil
	case BackendCPU:
		return BackendCPU, nil
	case BackendCUDA:
		return BackendCUDA, nil
	}
	return "", fmt.Errorf("unknown backend %q: use auto, cpu or cuda", s)
}

// Backend runs one loaded model's forward passes on one kind of hardware.
// It is the single interface the scheduler (internal/daemon/sched) drives, so it
// never knows whether a pass runs on the CPU or a GPU. Sequences belong
// to the Backend that made them.
type Backend interface {
	// Name is BackendCPU or BackendCUDA.
	Name() string
	// Config is the model's hyperparameters.
	Config() model.Config
	// MaxContext is the largest context a Sequence can reach: the
	// model's trained context on the CPU (its cache grows on demand),
	// the KV-cache slot size on a GPU.
	MaxContext() int
	// MaxSeqs is how many Sequences may be open at once; 0 means no limit
	// (the CPU backend allocates caches as sequences grow).
	MaxSeqs() int
	// NewSequence returns an empty sequence whose context may grow to
	// maxCtx positions (<= 0 or above MaxContext means MaxContext). It
	// fails when MaxSeqs sequences are open.
	NewSequence(maxCtx int) (Sequence, error)
	// Forward advances every step's sequence by its tokens in one batched
	// pass and fills the steps' Logits (or, where the backend can pick
	// them on the device, Greedy steps' Tokens), with engine/model.Forward's
	// contract (the batch is checked by model.CheckBatch before anything
	// changes; a failed or cancelled pass leaves every sequence at its old
	// position).
	Forward(ctx context.Context, batch []model.Step) error
}

// Sequence is one stream of tokens with its KV cache on a Backend:
// engine/model's Seq, which engine/model and engine/gpu sequences both
// are. Close gives the cache back (on a GPU it frees a slot for the next
// sequence); a closed sequence cannot be used in Forward.
type Sequence = model.Seq

// BackendInfo says which backend runs the model, on what, and why.
type BackendInfo struct {
	// Name is BackendCPU or BackendCUDA; Requested is what Options asked
	// for (BackendAuto, BackendCPU or BackendCUDA).
	Name, Requested string
	// Reason says why the CPU runs the model when the GPU was not asked
	// to be skipped: "CUDA unavailable: …" for auto without a usable GPU.
	// Empty otherwise.
	Reason string
	// Device is the GPU's name ("NVIDIA H200"), Ordinal its index,
	// ComputeCapability its SM version ("9.0"), DeviceMemory its total
	// memory and DeviceFree what was free before the model loaded. Zero
	// on the CPU.
	Device            string
	Ordinal           int
	ComputeCapability string
	DeviceMemory      int64
	DeviceFree        int64
	// Kernels is the kernel build the GPU runs (gpu.Model's
	// KernelImage: the sm_90 cubins or PTX the driver JIT-compiled), or
	// on the CPU engine/gemv's kernel family ("gemv avx512").
	Kernels string
	// WeightBytes is the device memory the resident weights take and
	// StreamedBytes what crosses PCIe per pass (tier B), on the GPU.
	WeightBytes, StreamedBytes int64
	// KVBytes is the device memory of the KV cache (allocated up front on
	// the GPU; 0 on the CPU, whose caches grow with the sequences).
	KVBytes int64
	// Slots is the number of KV-cache slots (sequences at once) on the
	// GPU, MaxContext the positions of each.
	Slots, MaxContext int
}

// String describes the backend in one line: "cuda (NVIDIA H200, GPU 0,
// sm 9.0, 139.8 GiB)" or "cpu (CUDA unavailable: …; gemv avx2)".
func (b BackendInfo) String() string {
	if b.Name == BackendCUDA {
		return fmt.Sprintf("cuda (%s, GPU %d, sm %s, %.1f GiB)", b.Device, b.Ordinal, b.ComputeCapability, float64(b.DeviceMemory)/(1<<30))
	}
	kern := ""
	if b.Kernels != "" {
		kern = "; " + b.Kernels
	}
	switch {
	case b.Reason != "":
		return "cpu (" + b.Reason + kern + ")"
	case b.Requested == BackendCPU:
		return "cpu (requested" + kern + ")"
	}
	if kern != "" {
		return "cpu (" + b.Kernels + ")"
	}
	return "cpu"
}

// ErrSequenceClosed is wrapped by Forward when a step's sequence was
// closed (engine/model's, re-exported).
var ErrSequenceClosed = model.ErrSequenceClosed

// cpuBackend runs passes on engine/model, through the engine's streaming
// pipeline when some layers stream. It adds nothing to the arithmetic: a
// pass is exactly Engine's model (or pipeline) Forward over the same
// steps, which validates them.
type cpuBackend struct{ e *Engine }

func (b cpuBackend) Name() string         { return BackendCPU }
func (b cpuBackend) Config() model.Config { return b.e.Model.Config }
func (b cpuBackend) MaxContext() int      { return b.e.Model.Config.Context }
func (b cpuBackend) MaxSeqs() int         { return 0 }

func (b cpuBackend) NewSequence(maxCtx int) (Sequence, error) {
	return b.e.Model.NewSequence(maxCtx), nil
}

// Forward is the CPU pass: through the pipeline when layers stream.
func (b cpuBackend) Forward(ctx context.Context, batch []model.Step) error {
	if b.e.pipe != nil {
		return b.e.pipe.Forward(ctx, b.e.Model, batch)
	}
	return b.e.Model.Forward(ctx, batch)
}

// Backend is the backend the engine runs on; Forward goes through it, and
// the scheduler drives it directly.
func (e *Engine) Backend() Backend { return e.backend }

// BackendInfo describes the backend the engine runs on.
func (e *Engine) BackendInfo() BackendInfo { return e.binfo }

// NewSequence returns an empty sequence on the engine's backend (see
// Backend.NewSequence).
func (e *Engine) NewSequence(maxCtx int) (Sequence, error) { return e.backend.NewSequence(maxCtx) }

// MaxContext is the largest context one sequence can reach on the
// engine's backend.
func (e *Engine) MaxContext() int { return e.backend.MaxContext() }

// Forward runs one batched forward pass on the engine's backend: every
// step's sequence advances by its tokens, and each streamed layer is moved
// once for the whole batch. On the CPU with a pipeline the pass runs under
// ctx from its first read (prefetch starts before the embedding), and a
// failed read fails only this pass.
func (e *Engine) Forward(ctx context.Context, batch []model.Step) error {
	return e.backend.Forward(ctx, batch)
}
