package daemon

import (
	"sync"
	"time"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/internal/blocktrace"
)

// blockInterval is how often the tracer is sampled for status: the rates
// in `strata status` cover the time since the sample before last, between
// one and two intervals, so they are never computed over a sliver.
const blockInterval = 5 * time.Second

// blockIO owns the eBPF block tracer for one Server: it is started by
// StartBlockTrace and stopped by Close.
type blockIO struct {
	mu      sync.Mutex
	tr      *blocktrace.Tracer
	note    string
	older   blocktrace.Snapshot // the sample before prev
	prev    blocktrace.Snapshot // the latest tick's sample
	stop    chan struct{}
	stopped chan struct{}
}

// StartBlockTrace loads the block-layer tracer so that status and /metrics
// show per-disk bytes, IOPS and latency while layers stream. Without BTF or
// the privilege to load BPF it logs why and the daemon carries on; status
// then says so.
func (s *Server) StartBlockTrace() {
	b := &blockIO{}
	// Published once complete: status may read it from another goroutine.
	defer s.blockIO.Store(b)
	tr, err := blocktrace.Start(s.log.Named("blocktrace"))
	if err != nil {
		b.note = "block I/O statistics off: " + err.Error()
		s.log.Warn("block I/O statistics off", "error", err)
		return
	}
	first, err := tr.Snapshot()
	if err != nil {
		tr.Close()
		b.note = "block I/O statistics off: " + err.Error()
		s.log.Warn("block I/O statistics off", "error", err)
		return
	}
	b.tr, b.prev, b.older = tr, first, first
	b.stop, b.stopped = make(chan struct{}), make(chan struct{})
	s.metrics.reg.MustRegister(blocktrace.NewCollector(tr))
	go b.sample()
}

// sample refreshes the per-interval summaries until stopped.
func (b *blockIO) sample() {
	defer close(b.stopped)
	t := time.NewTicker(blockInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			snap, err := b.tr.Snapshot()
			if err != nil {
				continue // keep the last good sample; the collector reports read errors
			}
			b.mu.Lock()
			b.older, b.prev = b.prev, snap
			b.mu.Unlock()
		}
	}
}

// blockStatus is what status reports; nil when tracing was never asked for.
func (s *Server) blockStatus() *api.BlockIO {
	b := s.blockIO.Load()
	if b == nil {
		return nil
	}
	out := &api.BlockIO{Enabled: b.tr != nil, Note: b.note, Devices: []api.BlockDevice{}}
	if b.tr == nil {
		return out
	}
	now, err := b.tr.Snapshot()
	if err != nil {
		out.Note = "reading the tracer's maps: " + err.Error()
		return out
	}
	b.mu.Lock()
	since := b.older
	b.mu.Unlock()
	for _, d := range now.Summarize(since) {
		out.Devices = append(out.Devices, api.BlockDevice{
			Device: d.Device, Seconds: d.Seconds, ReadMBps: d.ReadMBps, WriteMBps: d.WriteMBps,
			ReadIOPS: d.ReadIOPS, WriteIOPS: d.WriteIOPS, ReadP50Nanos: int64(d.ReadP50), ReadP99Nanos: int64(d.ReadP99),
			Errors: d.Errors,
		})
	}
	return out
}

// stopBlockTrace detaches the tracer; safe when it never started.
func (s *Server) stopBlockTrace() {
	b := s.blockIO.Swap(nil)
	if b == nil || b.tr == nil {
		return
	}
	close(b.stop)
	<-b.stopped
	if err := b.tr.Close(); err != nil {
		s.log.Warn("closing the block tracer", "error", err)
	}
}
