package blocktrace

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Tracer holds the loaded BPF programs and their maps. Its methods are safe
// for concurrent use.
type Tracer struct {
	mu    sync.Mutex
	objs  blocktraceObjects
	links []link.Link
	since time.Time
	sysfs string
	names map[Dev]string
	log   hclog.Logger
}

// Start loads the BPF programs, attaches them to the block tracepoints and
// starts counting. The error wraps ErrNotSupported when the kernel has no
// BTF or the tracepoints, ErrPermission when the process may not load BPF;
// both mean "run without block statistics", which callers log and accept.
func Start(log hclog.Logger) (*Tracer, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return nil, fmt.Errorf("%w: kernel BTF unavailable (/sys/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF): %v", ErrNotSupported, err)
	}
	t := &Tracer{sysfs: "/sys", names: map[Dev]string{}, log: log}
	if err := loadBlocktraceObjects(&t.objs, nil); err != nil {
		return nil, classify("loading the BPF programs", err)
	}
	for _, p := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"block_rq_issue", t.objs.BlockRqIssue},
		{"block_rq_complete", t.objs.BlockRqComplete},
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			t.Close()
			return nil, classify("attaching to tracepoint "+p.name, err)
		}
		t.links = append(t.links, l)
	}
	t.since = time.Now()
	log.Debug("block tracer attached", "tracepoints", "block_rq_issue,block_rq_complete")
	return t, nil
}

// classify wraps err with the sentinel that tells the caller why.
func classify(what string, err error) error {
	switch {
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s: %v", ErrNotSupported, what, err)
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%w: %s: %v", ErrPermission, what, err)
	}
	return fmt.Errorf("blocktrace: %s: %w", what, err)
}

// Snapshot reads every device's counters, summed over CPUs.
func (t *Tracer) Snapshot() (Snapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objs.Stats == nil {
		return Snapshot{}, errors.New("blocktrace: tracer closed")
	}
	s := Snapshot{Since: t.since}
	var (
		key    uint32
		perCPU []blocktraceDevstats
	)
	it := t.objs.Stats.Iterate()
	for it.Next(&key, &perCPU) {
		d := Device{Dev: kernelDev(key)}
		for _, c := range perCPU {
			for op := range numOps {
				d.Ops[op].IOs += c.Ios[op]
				d.Ops[op].Bytes += c.Bytes[op]
				d.Ops[op].Untimed += c.Untimed[op]
				for i := range Slots {
					d.Ops[op].Latency[i] += c.Hist[op][i]
				}
			}
			d.Errors += c.Errors
		}
		name, ok := t.names[d.Dev]
		if !ok {
			name = diskName(t.sysfs, d.Dev)
			t.names[d.Dev] = name
		}
		d.Name = name
		s.Devices = append(s.Devices, d)
	}
	if err := it.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("blocktrace: reading counters: %w", err)
	}
	s.Taken = time.Now()
	for _, p := range []*ebpf.Program{t.objs.BlockRqIssue, t.objs.BlockRqComplete} {
		if st, err := p.Stats(); err == nil {
			s.Missed += st.RecursionMisses
		}
	}
	sort.Slice(s.Devices, func(i, j int) bool {
		a, b := s.Devices[i].Dev, s.Devices[j].Dev
		return a.Major < b.Major || a.Major == b.Major && a.Minor < b.Minor
	})
	return s, nil
}

// Close detaches the programs and frees the maps. It is safe to call more
// than once.
func (t *Tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	if t.objs.Stats != nil || t.objs.BlockRqIssue != nil {
		errs = append(errs, t.objs.Close())
		t.objs = blocktraceObjects{}
	}
	return errors.Join(errs...)
}

func statDev(path string) (Dev, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Dev{}, fmt.Errorf("blocktrace: stat %s: %w", path, err)
	}
	return Dev{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev)}, nil
}
