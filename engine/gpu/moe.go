package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// cpuMoE runs a mixture-of-experts model's FFN blocks — router, the
// experts it picks, their weighted sum — on the CPU beside the GPU's
// attention: the shape of llama.cpp's --cpu-moe, and how strata runs such
// models on a GPU until it has expert kernels. Attention, norms and the
// output head stay on the device (resident or streamed); each layer's
// hidden state crosses to pinned host memory after its attention and back
// after its FFN, which engine/model's FFNDevice computes from the layer's
// host weights (experts in host memory, or served by an ExpertSource).
type cpuMoE struct {
	dev    *model.FFNDevice
	layers []*model.Layer   // host weights per layer (experts in packed when it is set)
	packed *hostmem.Region  // the experts in 2 MiB pages (packExperts); nil when src serves them
	buf    *cudadrv.HostMem // hidden state, rows of Dim float32, mapped
	bufDev cudadrv.DevPtr   // buf's device address
	rows   [][]float32      // buf's rows
	stats  MoEStats
}

// MoEStats counts the CPU's work for a mixture-of-experts model on the GPU.
type MoEStats struct {
	// Layers is the FFN blocks the CPU computed; Busy its time in them;
	// Hop the time spent handing the hidden state over (waiting for the
	// GPU to reach the layer and the two copies).
	Layers int64         `json:"layers"`
	Busy   time.Duration `json:"busy_ns"`
	Hop    time.Duration `json:"hop_ns"`
}

// setupMoE prepares the CPU's FFN device for a mixture-of-experts model
// (w's layers hold the router and, unless src serves them, the experts).
func (m *Model) setupMoE(w *model.Weights, src model.ExpertSource) error {
	dev, err := model.NewFFNDevice(m.Config, gemv.Detect())
	if err != nil {
		return fmt.Errorf("mixture of experts on the CPU: %w", err)
	}
	if src != nil {
		dev.SetExpertSource(src)
	}
	x := &cpuMoE{dev: dev}
	if src != nil {
		for i := range w.Layers {
			x.layers = append(x.layers, &w.Layers[i])
		}
	} else if x.layers, x.packed, err = packExperts(w); err != nil {
		return fmt.Errorf("mixture of experts on the CPU: %w", err)
	}
	m.moe = x
	return nil
}

// ensureRows grows the pinned hidden-state buffer to T rows.
func (x *cpuMoE) ensureRows(c *cudadrv.Ctx, T, dim int) error {
	if len(x.rows) >= T {
		return nil
	}
	n := max(T, 2*len(x.rows))
	buf, err := c.HostAlloc(n*dim*4, cudadrv.HostAllocDeviceMap)
	if err != nil {
		return fmt.Errorf("hidden-state buffer of %d rows: %w", n, err)
	}
	bufDev, err := c.HostDevicePointer(buf)
	if err != nil {
		return fmt.Errorf("hidden-state buffer: %w", errors.Join(err, c.FreeHost(buf)))
	}
	vals, err := cudadrv.Values[float32](buf.Bytes())
	if err != nil {
		return fmt.Errorf("hidden-state buffer: %w", errors.Join(err, c.FreeHost(buf)))
	}
	if err := c.FreeHost(x.buf); err != nil {
		return err
	}
	x.buf, x.bufDev, x.rows = buf, bufDev, x.rows[:0]
	for t := range n {
		x.rows = append(x.rows, vals[t*dim:(t+1)*dim])
	}
	return nil
}

// moeFFN runs layer l's FFN on the CPU for the pass's T rows of the
// hidden state: the state goes to mapped pinned memory (a kernel, as in
// the hybrid placement's cpuFFN, so that it never waits behind streamed
// layers' copies), the compute stream drains, the CPU adds the FFN, and
// the way back is enqueued before the next layer's kernels.
func (m *Model) moeFFN(ctx context.Context, c *cudadrv.Ctx, l, T int) error {
	x := m.moe
	if ctx == nil {
		ctx = context.Background()
	}
	if err := x.ensureRows(c, T, m.Config.Dim); err != nil {
		return err
	}
	n := int64(T * m.Config.Dim)
	t0 := time.Now()
	if err := m.k.Copy(c, m.stream, x.bufDev, m.act.h, n); err != nil {
		return err
	}
	if err := c.StreamSync(m.stream); err != nil {
		return err
	}
	t1 := time.Now()
	if err := x.dev.Run(ctx, l, x.layers[l], x.rows[:T]); err != nil {
		return err
	}
	t2 := time.Now()
	if err := m.k.Copy(c, m.stream, m.act.h, x.bufDev, n); err != nil {
		return err
	}
	x.stats.Layers++
	x.stats.Busy += t2.Sub(t1)
	x.stats.Hop += t1.Sub(t0) + time.Since(t2)
	return nil
}

// MoEStats returns the CPU's FFN work so far for a mixture-of-experts
// model; ok is false for any other model.
func (m *Model) MoEStats() (MoEStats, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return MoEStats{}, false
	}
	return m.moe.stats, true
}

// ExpertCounts is, per layer and expert, how many tokens the router sent
// to the expert (model.Model.ExpertCounts of the CPU's FFN device, which
// routes for the GPU): the expected use the engine places experts by. Nil
// for a model without experts.
func (m *Model) ExpertCounts() [][]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return nil
	}
	return m.moe.dev.ExpertCounts()
}

// SetRouterSkew skews later passes' routing by a Zipf law of exponent s
// over each layer's experts (model.Model.SetRouterSkew), for benchmarks:
// random weights route almost uniformly. A model without experts refuses.
func (m *Model) SetRouterSkew(s float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.moe == nil {
		return errors.New("router skew: not a mixture-of-experts model")
	}
	return m.moe.dev.SetRouterSkew(s)
}

// release frees the pinned hidden-state buffer.
func (x *cpuMoE) release(c *cudadrv.Ctx) error {
	if x == nil {
		return nil
	}
	err := c.FreeHost(x.buf)
	x.buf, x.bufDev, x.rows = nil, 0, nil
	if x.packed != nil {
		err = errors.Join(err, x.packed.Free())
		x.packed, x.layers = nil, nil
	}
	return err
}
