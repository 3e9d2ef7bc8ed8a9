package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// UnpackBF16 decodes a tensor of n bf16 values packed in engine/quant's
// lossless format (quant.PackBF16) at src into plain bf16 at dst (2n
// bytes), bit for bit as quant.UnpackBF16 does. Streamed bf16 layers cross
// PCIe packed (about 0.76 of their bytes) and are decoded on the device
// just before use. n must be a whole number of quant.BF16PackBlock blocks
// (every matrix of a real model is); src and dst must be 16-byte aligned.
// The blob is trusted: the host encoded it (quant.UnpackBF16 is the
// validating decoder).
func (k *Kernels) UnpackBF16(c *cudadrv.Ctx, s cudadrv.Stream, src cudadrv.DevPtr, n int64, dst cudadrv.DevPtr) error {
	if n <= 0 || n%quant.BF16PackBlock != 0 || n > quant.BF16PackMaxElems {
		return fmt.Errorf("unpack bf16: %d values: want a positive multiple of %d up to %d", n, quant.BF16PackBlock, int64(quant.BF16PackMaxElems))
	}
	if (uint64(src)|uint64(dst))%16 != 0 {
		return fmt.Errorf("unpack bf16: src %#x or dst %#x not 16-byte aligned", uint64(src), uint64(dst))
	}
	l := quant.BF16PackLayoutFor(n, 0)
	const threads = 256
	groups := n / 16 // one thread per 16 values
	var a cudadrv.Args
	a.Ptr(src.Add(l.SM)).Ptr(src.Add(l.Nib)).Ptr(src.Add(l.Base)).Ptr(src.Add(l.EscOff)).Ptr(src.Add(l.Esc)).Ptr(dst).I64(l.Blocks)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32((groups + threads - 1) / threads)}, Block: cudadrv.Dim3{X: threads}}
	return k.launch(c, s, "bf16_unpack", cfg, &a)
}
