package gpu

import (
	"errors"

	"github.com/strata-llm/strata/engine/model"
)

// cpuDevice is the CPU's FFN device beside the GPU: the hybrid's or the
// mixture-of-experts model's; nil where the CPU computes nothing.
func (m *Model) cpuDevice() *model.FFNDevice {
	switch {
	case m.hy != nil:
		return m.hy.dev
	case m.moe != nil:
		return m.moe.dev
	}
	return nil
}

// SetCPUHold has the CPU's threads beside the GPU poll for the whole of
// each pass instead of going to sleep when a gap between the layers it
// computes outlasts their spin (workpool.Pool.Hold): between its layers
// the CPU waits for the GPU's (the lead before the first, each hop, and
// a mixture-of-experts model's layers held on the device), and a thread
// woken from sleep, or a core from a deep idle state, starts its share
// late. Off by default until it wins its benchmark (hybrid_hold_*,
// dev_stream_hold_*); it fails for a model on which the CPU computes
// nothing.
func (m *Model) SetCPUHold(on bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on && m.cpuDevice() == nil {
		return errors.New("cpu hold: the CPU computes nothing beside this model's GPU")
	}
	m.cpuHold = on
	return nil
}
