package engine

import (
	"context"
	"time"

	"github.com/strata-llm/strata/engine/gpu"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// WithOpenDevice returns o with f standing in for opening the GPU.
func WithOpenDevice(o Options, f func() (*cudadrv.Device, error)) Options {
	o.openDev = f
	return o
}

// NewFakeLinkCache returns a LinkCache whose measurements return fixed
// speeds without touching the machine, and a function that reports how
// many of each ran. storage, when not nil, runs inside the storage
// measurement with its context (a test cancels the load there).
func NewFakeLinkCache(storage func(ctx context.Context)) (*LinkCache, func() map[string]int) {
	c := newLinkCache(linkProbes{
		storage: func(ctx context.Context, path string, limit int64) (tier.StorageResult, error) {
			if storage != nil {
				storage(ctx)
			}
			if err := ctx.Err(); err != nil {
				return tier.StorageResult{}, err
			}
			return tier.StorageResult{Bandwidth: 2e9, Latency: 80 * time.Microsecond, Bytes: limit, Direct: true}, nil
		},
		memmove: func(context.Context, time.Duration) float64 { return 20e9 },
		compute: func(context.Context, quant.Type, time.Duration) (float64, error) { return 40e9, nil },
		h2d:     func(*cudadrv.Device, int64, int) (float64, error) { return 50e9, nil },
	})
	return c, c.measurements
}

// SetDeviceAdaptation shortens e's device adapter's look and window (a
// test's serving is short); false when e has none. Call it before the
// passes it should see.
func SetDeviceAdaptation(e *Engine, every, window uint64) bool {
	if e.adapter == nil {
		return false
	}
	e.adapter.every, e.adapter.window = every, window
	return true
}

// CUDAModel is e's GPU model (nil on the CPU).
func CUDAModel(e *Engine) *gpu.Model { return e.cuda }

// SettleExperts waits for e's expert store's background work (reads ahead
// and a round of promotions) to end, so its stats and its source's reads
// count the same reads. No pass may be running.
func SettleExperts(e *Engine) {
	s := e.experts
	if s == nil {
		return
	}
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
}

// WithMemInfo returns o with f standing in for reading /proc/meminfo.
func WithMemInfo(o Options, f func() (tier.MemInfo, error)) Options {
	o.memInfo = f
	return o
}
