package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// Span is a range of device bytes.
type Span struct {
	Ptr   cudadrv.DevPtr
	Bytes int64
}

// readXORGrid is read_xor's blocks per multiprocessor: persistent, eight
// 256-thread blocks (every thread slot of a 2048-thread multiprocessor)
// with four 16-byte loads a thread in flight, 128 KB a multiprocessor.
// With four or two blocks it read markedly slower: a ceiling has to keep
// every thread slot reading, or it measures the reader instead of the
// launches.
const readXORGrid = 8

// ReadXORBlocks is how many blocks ReadXOR launches, and so how many
// uint32 words its sink holds.
func (k *Kernels) ReadXORBlocks() int { return readXORGrid * k.SMs }

// ReadXOR launches read_xor over up to three spans, each widened to the
// 16-byte words that cover it (a Q6_K matrix need only be 2-byte
// aligned; the words stay inside the 256-byte granules its allocation
// covers): block b XORs the words it read into the uint32 at sink + 4b,
// for ReadXORBlocks blocks, so the XOR of those words is the spans'. Its
// use is the read-only ceiling of a launch sequence (SetGEMVReadOnly); a
// test checks the XOR against the host's.
func (k *Kernels) ReadXOR(c *cudadrv.Ctx, s cudadrv.Stream, sink cudadrv.DevPtr, spans ...Span) error {
	if len(spans) == 0 || len(spans) > 3 {
		return fmt.Errorf("read_xor: %d spans, want 1 to 3", len(spans))
	}
	if sink == 0 || sink%4 != 0 {
		return fmt.Errorf("read_xor: sink at %#x is not a 4-byte aligned device word", uint64(sink))
	}
	var a cudadrv.Args
	for i := 0; i < 3; i++ {
		if i >= len(spans) || spans[i].Bytes == 0 {
			a.Ptr(0).I64(0)
			continue
		}
		sp := spans[i]
		if sp.Bytes < 0 || sp.Ptr == 0 {
			return fmt.Errorf("read_xor: span %d: %d bytes at %#x", i, sp.Bytes, uint64(sp.Ptr))
		}
		lo := sp.Ptr &^ 15
		hi := (sp.Ptr + cudadrv.DevPtr(sp.Bytes) + 15) &^ 15
		a.Ptr(lo).I64(int64(hi-lo) / 16)
	}
	a.Ptr(sink)
	f, err := k.fn("read_xor")
	if err != nil {
		return err
	}
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32(k.ReadXORBlocks())}, Block: cudadrv.Dim3{X: 256}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return fmt.Errorf("read_xor: %w", err)
	}
	return nil
}

// SetGEMVReadOnly is for benchmarks: with a sink set (ReadXORBlocks
// device words), every integer GEMV launch of this Kernels — the fused,
// mixed, Q6_K and Q6KA kernels gemvqLaunch picks, for a norm's,
// attention's or its own quantized x — is replaced by one read_xor launch over the same
// matrices, launched where and as often as the products would be; the x
// quantization before it still runs, the outputs are left as they were,
// and GEMVs off the integer path (float, F16, BF16) run as usual. A
// step's GEMVs captured that way time what the same launch sequence costs
// when its kernels only read their weights: the ceiling
// internal/bench/gputime's ProfileDecodeStep reports beside the GEMVs' own figure.
// Sink 0 turns it off. Not safe for concurrent use with launches of k.
func (k *Kernels) SetGEMVReadOnly(sink cudadrv.DevPtr) { k.readOnlySink = sink }

// gemvqOrRead runs launch, one integer GEMV launch over the matrices of
// outs, or, while SetGEMVReadOnly has a sink set, one read_xor over the
// same matrices in its place: gemvqLaunch takes each of its launches
// through here, so the read-only sequence is the products' one by
// construction.
func (k *Kernels) gemvqOrRead(c *cudadrv.Ctx, s cudadrv.Stream, what string, launch func() error, outs ...[]GEMVOut) error {
	if k.readOnlySink == 0 {
		return launch()
	}
	var sp []Span
	for _, group := range outs {
		for _, o := range group {
			sp = append(sp, Span{Ptr: o.W.Ptr, Bytes: o.W.Bytes()})
		}
	}
	if err := k.ReadXOR(c, s, k.readOnlySink, sp...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
