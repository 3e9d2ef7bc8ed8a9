package gemv

import (
	"golang.org/x/sys/cpu"

	"github.com/strata-llm/strata/engine/quant"
)

// panelReady reports whether this CPU runs the panel kernels: AVX-512
// with VNNI (VPDPWSSD) and DQ (VEXTRACTF32X8).
func panelReady() bool {
	return available(AVX512) && cpu.X86.HasAVX512VNNI && cpu.X86.HasAVX512DQ
}

// lookupPanel is the panel kernel for t under impl, nil where none runs.
func lookupPanel(impl Impl, t quant.Type) panelKernel {
	if impl < AVX512 || !panelReady() {
		return nil
	}
	switch t {
	case quant.Q4_K:
		return q4kPanelVNNI
	case quant.Q5_K:
		return q5kPanelVNNI
	case quant.Q6_K:
		return q6kPanelVNNI
	}
	return nil
}
