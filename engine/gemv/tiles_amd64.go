package gemv

import (
	"sync"

	"golang.org/x/sys/cpu"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostcpu"
)

var amxOnce = sync.OnceValue(func() bool {
	x := &cpu.X86
	return x.HasAMXTile && x.HasAMXBF16 && x.HasAVX512BF16 && hostcpu.EnableAMX() == nil
})

// amxReady reports whether this CPU has AMX's bfloat16 tiles (and
// AVX512_BF16, which the widening kernels round with) and the kernel lets
// the process use them (asked for once, here).
func amxReady() bool { return amxOnce() }

// widens are the formats' widening kernels (asm/widen.go): the formats
// of a Q4_K_M or Q8_0 model's matrices.
var widens = map[quant.Type]widen{quant.Q4_K: q4kWiden, quant.Q6_K: q6kWiden, quant.Q8_0: q8Widen}
