// Package gpu is strata's GPU backend: it runs the whole forward pass of
// engine/model's architectures (llama and Mistral, Gemma 2 and 3, Qwen2
// and 3, Phi-3) on one CUDA device with the kernels of package kernels,
// with exactly engine/model's semantics, so the CPU reference and the GPU
// are interchangeable behind the engine and every GPU result can be
// checked against the CPU. What the architectures add to llama's pass is
// composed from the same kernels: Qwen2's biases are row-wise adds, q/k
// norms an RMSNorm over heads, Phi-3's fused matrices uploaded as their
// row views, LongRoPE's attention factor folded into the attention scale.
//
// Load uploads a model's weights (tier A: every layer resident in device
// memory, each tensor's GGUF bytes copied unchanged) and allocates a pool
// of KV-cache slots, one per Sequence. Forward advances every sequence of a
// batch in one pass over the layers: prompt tokens go through the
// tensor-core GEMM, decode steps of up to eight sequences through the
// batched dequantizing GEMV. A pure decode step (one token per sequence)
// is captured once as a CUDA graph and replayed: token ids, positions and
// cache slots are read from device memory, so the graph stays valid as the
// sequences advance.
//
// Layers listed in Options.StreamLayers stay on tier B instead: packed in
// pinned host memory and copied, every pass, into one of k device slots.
// Layers in Options.TierC stay on tier C, in storage, and are read every
// pass from an engine/stream Source into one of k staging buffers (the
// source's own aligned buffers, page-locked with cuMemHostRegister) before
// their copy. Both run through engine/stream's pipeline, the one the CPU
// backend uses, on the CUDA device seam (streamDev in tier.go): copies on
// a copy stream separate from the compute stream, with a "loaded" event
// per slot that the compute stream waits on and a "free" event that the
// next copy into the slot waits on. Everything after the reads is ordered
// on the device, so the host enqueues a pass without waiting and the copy
// engine stays busy; the host waits only when compute needs a layer whose
// read has not finished. Model.PipelineStats reports the three stages as
// engine/stream's Stats. A source that can DMA straight into device memory
// (SlotReader) is the seam for a GPU-BAR route; it is not wired in yet.
//
// Every driver call runs inside Device.Do of package kernels/cudadrv, on the
// device's locked OS thread; one Forward is one hand-off.
//
// Steps are engine/model's Step and sequences mirror engine/model's:
// Forward has the same contract (model.CheckBatch before anything changes,
// ErrContextOverflow, logits for the last token or all tokens, positions
// unchanged by a failed or cancelled pass). The differences are that a
// Sequence holds a device cache slot, so NewSequence can fail when all
// Options.MaxSeqs slots are taken and a Sequence should be Closed to give
// its slot back, and that a sequence's capacity is bounded by
// Options.MaxContext rather than the model's trained context.
package gpu
