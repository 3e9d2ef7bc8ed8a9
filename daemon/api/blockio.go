package api

// BlockIO is the block-layer activity the daemon's eBPF tracer saw: what
// the file source's reads cost each disk. Enabled is false (with the reason
// in Note) when the kernel or the daemon's privileges do not allow tracing;
// the daemon runs on without it.
type BlockIO struct {
	Enabled bool          `json:"enabled"`
	Note    string        `json:"note,omitempty"`
	Devices []BlockDevice `json:"devices"`
}

// BlockDevice is one disk's activity over the last sampling interval.
type BlockDevice struct {
	Device       string  `json:"device"`
	Seconds      float64 `json:"seconds"`
	ReadMBps     float64 `json:"read_mb_per_s"`
	WriteMBps    float64 `json:"write_mb_per_s"`
	ReadIOPS     float64 `json:"read_iops"`
	WriteIOPS    float64 `json:"write_iops"`
	ReadP50Nanos int64   `json:"read_p50_ns"`
	ReadP99Nanos int64   `json:"read_p99_ns"`
	Errors       uint64  `json:"errors"`
}
