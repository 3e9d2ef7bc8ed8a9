package gpu

import (
	"time"

	"github.com/strata-llm/strata/kernels/cudadrv"
)

// What the external benchmarks of this package (package gpu_test, which
// time through bench/gputime: that package imports this one, so only an
// external test can use it) need from inside it.

var (
	OpenBig = openBig
	LoadGPU = loadGPU
)

// DecodeVariant is how Forward issues a decode step and waits for it: the
// copies inside the captured graph or around it (graphCopies), the wait by
// polling or by cuStreamSynchronize (waitPoll), the launches fused or not
// (fuseGEMV, fuseElementwise).
type DecodeVariant struct {
	Copies, Poll, FuseGEMV, FuseElementwise bool
}

// DefaultDecodeVariant is the variant Forward runs.
func DefaultDecodeVariant() DecodeVariant {
	return DecodeVariant{Copies: true, FuseGEMV: true, FuseElementwise: true}
}

// SetDecodeVariant switches every model of the process to v and drops
// m's captured graphs, so its next decode pass captures with v; it
// returns the variant it replaced.
func SetDecodeVariant(m *Model, v DecodeVariant) (DecodeVariant, error) {
	old := DecodeVariant{graphCopies, waitPoll, fuseGEMV, fuseElementwise}
	graphCopies, waitPoll, fuseGEMV, fuseElementwise = v.Copies, v.Poll, v.FuseGEMV, v.FuseElementwise
	m.mu.Lock()
	defer m.mu.Unlock()
	return old, m.dev.Do(func(c *cudadrv.Ctx) error { m.dropGraphs(c); return nil })
}

// ms and us print a duration in milliseconds and microseconds (the
// internal benchmarks' logs).
func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }
