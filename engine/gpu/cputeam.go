package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/internal/workpool"
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

// SetCPUTeam has the CPU beside the GPU compute on a team of its own:
// threads threads, the host thread that drives the GPU (the team's
// caller) among them, whose idle threads poll for spin before they sleep
// (workpool.Options); threads 0 puts it back on the process's shared
// pool, whose threads are as many as the CPUs. A team that keeps every
// processor polling leaves none to the host thread when it returns from
// the driver, and it waits for one (the Go runtime hands a processor of
// a thread in a system call to others when none is idle); a team one
// thread smaller may poll through the gaps between the CPU's layers,
// where the shared pool's threads sleep and wake late. Off by default
// until it wins its benchmark (hybrid_team_*, dev_stream_team_*); it
// fails for a model on which the CPU computes nothing.
func (m *Model) SetCPUTeam(threads int, spin time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if threads < 0 {
		return fmt.Errorf("cpu team: %d threads", threads)
	}
	dev := m.cpuDevice()
	if dev == nil {
		if threads == 0 {
			return nil
		}
		return errors.New("cpu team: the CPU computes nothing beside this model's GPU")
	}
	var team *workpool.Pool
	if threads > 0 {
		var err error
		if team, err = workpool.New(workpool.Options{Threads: threads, Spin: spin}); err != nil {
			return fmt.Errorf("cpu team: %w", err)
		}
	}
	dev.SetPool(team)
	old := m.cpuTeam
	m.cpuTeam = team
	if old != nil {
		if err := old.Close(); err != nil {
			return fmt.Errorf("cpu team: closing the last one: %w", err)
		}
	}
	return nil
}
