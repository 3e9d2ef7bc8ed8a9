package blocktrace

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors Start wraps, so callers can tell a host that cannot trace from a
// failure worth reporting.
var (
	// ErrNotSupported: the kernel lacks BTF or the tracepoints (Linux 5.11+).
	ErrNotSupported = errors.New("blocktrace: not supported by this kernel")
	// ErrPermission: the process lacks CAP_BPF and CAP_PERFMON.
	ErrPermission = errors.New("blocktrace: needs CAP_BPF and CAP_PERFMON (or root)")
)

// Slots is the number of latency histogram buckets.
const Slots = 32

// Op is a class of block request.
type Op int

// Request classes, as the BPF program sorts them by REQ_OP.
const (
	Read  Op = iota // REQ_OP_READ
	Write           // REQ_OP_WRITE
	Other           // flush, discard, write-zeroes, driver-private
	numOps
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	case Other:
		return "other"
	}
	return "op" + strconv.Itoa(int(o))
}

// Dev is a block device number.
type Dev struct {
	Major, Minor uint32
}

func (d Dev) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// kernelDev splits the kernel's internal dev_t (major << 20 | minor), which
// is what the BPF program records.
func kernelDev(v uint32) Dev { return Dev{Major: v >> 20, Minor: v & (1<<20 - 1)} }

// Histogram counts completed requests by latency from issue to completion.
// Bucket i holds latencies whose whole microseconds have their highest set
// bit at i, that is [2^i, 2^(i+1)) µs; bucket 0 also holds latencies under
// 1 µs, and the last bucket everything longer.
type Histogram [Slots]uint64

// UpperBound is the exclusive upper edge of bucket i.
func UpperBound(i int) time.Duration {
	return time.Duration(uint64(1)<<uint(i+1)) * time.Microsecond
}

// Count is the number of requests in the histogram.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, v := range h {
		n += v
	}
	return n
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) of the latency: the upper
// edge of the bucket where it falls, so the estimate is at most a factor of
// two high. 0 when the histogram is empty.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 || math.IsNaN(q) {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, v := range h {
		seen += v
		if seen >= rank {
			return UpperBound(i)
		}
	}
	return UpperBound(Slots - 1)
}

func (h Histogram) sub(o Histogram) Histogram {
	for i := range h {
		h[i] -= min(h[i], o[i])
	}
	return h
}

// OpStats is one request class of one device.
type OpStats struct {
	// IOs is the number of requests completed in full.
	IOs uint64 `json:"ios"`
	// Bytes is the number of bytes completed, partial completions included.
	Bytes uint64 `json:"bytes"`
	// Latency is the issue-to-completion histogram of the IOs the tracer
	// saw issued; Untimed counts the others (issued before it attached,
	// or whose issue record the kernel refused under concurrent I/O):
	// Latency.Count() + Untimed == IOs.
	Latency Histogram `json:"latency_log2_us"`
	Untimed uint64    `json:"untimed,omitempty"`
}

func (s OpStats) sub(o OpStats) OpStats {
	return OpStats{IOs: s.IOs - min(s.IOs, o.IOs), Bytes: s.Bytes - min(s.Bytes, o.Bytes), Latency: s.Latency.sub(o.Latency),
		Untimed: s.Untimed - min(s.Untimed, o.Untimed)}
}

// Device is what the tracer counted for one whole disk since it started.
type Device struct {
	Dev    Dev             `json:"dev"`
	Name   string          `json:"name"`   // kernel name, e.g. "nvme0n1"; "" when sysfs has none
	Ops    [numOps]OpStats `json:"ops"`    // indexed by Op
	Errors uint64          `json:"errors"` // completions with a non-zero block status
}

// Op returns the counters of one request class.
func (d Device) Op(o Op) OpStats {
	if o < 0 || o >= numOps {
		return OpStats{}
	}
	return d.Ops[o]
}

// Sub returns d minus an earlier reading of the same device: what happened
// between the two snapshots.
func (d Device) Sub(earlier Device) Device {
	out := d
	for i := range out.Ops {
		out.Ops[i] = d.Ops[i].sub(earlier.Ops[i])
	}
	out.Errors -= min(d.Errors, earlier.Errors)
	return out
}

// Snapshot is the state of every device the tracer has seen.
type Snapshot struct {
	// Since is when the tracer started counting.
	Since time.Time `json:"since"`
	// Taken is when the counters were read.
	Taken   time.Time `json:"taken"`
	Devices []Device  `json:"devices"`
	// Missed is how many tracepoint hits the kernel did not run the
	// tracer's programs for since it started (their recursion misses: a
	// completion that arrives on a CPU while the program is already
	// running there, say in an interrupt on top of a softirq completion,
	// is dropped, not queued), so the counters can fall short of the
	// device's by that many requests; 0 where the kernel does not report
	// it (before 5.12).
	Missed uint64 `json:"missed,omitempty"`
}

// Device returns one device's counters (zero when it did no I/O).
func (s Snapshot) Device(d Dev) Device {
	for _, x := range s.Devices {
		if x.Dev == d {
			return x
		}
	}
	return Device{Dev: d}
}

// Rate is a device's throughput over an interval.
type Rate struct {
	BytesPerSec float64
	IOPS        float64
}

// Rates divides what happened between earlier and s, per request class, by
// the time between them.
func (s Snapshot) Rates(earlier Snapshot, d Dev) [numOps]Rate {
	var r [numOps]Rate
	dt := s.Taken.Sub(earlier.Taken).Seconds()
	if dt <= 0 {
		return r
	}
	delta := s.Device(d).Sub(earlier.Device(d))
	for i, o := range delta.Ops {
		r[i] = Rate{BytesPerSec: float64(o.Bytes) / dt, IOPS: float64(o.IOs) / dt}
	}
	return r
}

// DiskOf returns the whole disk that holds path's file system (the parent
// of a partition), the device the tracer reports for its I/O. sysfs is the
// sysfs mount point ("" means /sys). It fails for file systems on no block
// device (tmpfs, overlay's upper layers on some hosts, network file systems).
func DiskOf(sysfs, path string) (Dev, string, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	d, err := statDev(path)
	if err != nil {
		return Dev{}, "", err
	}
	dir := filepath.Join(sysfs, "dev", "block", d.String())
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return d, "", fmt.Errorf("blocktrace: %s is on device %s, which is no block device in sysfs: %w", path, d, err)
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		real = filepath.Dir(real)
		raw, err := os.ReadFile(filepath.Join(real, "dev"))
		if err != nil {
			return d, "", fmt.Errorf("blocktrace: parent disk of %s: %w", d, err)
		}
		maj, minor, ok := strings.Cut(strings.TrimSpace(string(raw)), ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(minor, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return d, "", fmt.Errorf("blocktrace: parent disk of %s: odd dev %q", d, raw)
		}
		d = Dev{uint32(ma), uint32(mi)}
	}
	return d, filepath.Base(real), nil
}

// diskName returns the kernel name of a block device from sysfs, "" if
// none.
func diskName(sysfs string, d Dev) string {
	real, err := filepath.EvalSymlinks(filepath.Join(sysfs, "dev", "block", d.String()))
	if err != nil {
		return ""
	}
	return filepath.Base(real)
}

// Summary is one device's activity over an interval, in the units a status
// line shows; what `strata status` prints per disk.
type Summary struct {
	Device    string  `json:"device"` // kernel name, or major:minor
	Seconds   float64 `json:"seconds"`
	ReadMBps  float64 `json:"read_mb_per_s"`
	WriteMBps float64 `json:"write_mb_per_s"`
	ReadIOPS  float64 `json:"read_iops"`
	WriteIOPS float64 `json:"write_iops"`
	// ReadP50 and ReadP99 are read latency quantiles over the interval
	// (bucket upper edges: at most 2× high).
	ReadP50 time.Duration `json:"read_p50_ns"`
	ReadP99 time.Duration `json:"read_p99_ns"`
	Errors  uint64        `json:"errors"`
}

// Summarize describes what every device did between earlier and s; devices
// that did nothing in the interval are left out.
func (s Snapshot) Summarize(earlier Snapshot) []Summary {
	dt := s.Taken.Sub(earlier.Taken).Seconds()
	if dt <= 0 {
		return nil
	}
	var out []Summary
	for _, d := range s.Devices {
		delta := d.Sub(earlier.Device(d.Dev))
		r, w := delta.Op(Read), delta.Op(Write)
		if r.IOs+w.IOs+delta.Op(Other).IOs+delta.Errors == 0 {
			continue
		}
		name := d.Name
		if name == "" {
			name = d.Dev.String()
		}
		out = append(out, Summary{
			Device: name, Seconds: dt,
			ReadMBps: float64(r.Bytes) / dt / 1e6, WriteMBps: float64(w.Bytes) / dt / 1e6,
			ReadIOPS: float64(r.IOs) / dt, WriteIOPS: float64(w.IOs) / dt,
			ReadP50: r.Latency.Quantile(0.5), ReadP99: r.Latency.Quantile(0.99),
			Errors: delta.Errors,
		})
	}
	return out
}
