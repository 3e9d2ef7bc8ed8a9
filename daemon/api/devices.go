package api

import "time"

// The device API: stratad owns the NVMe controllers it streams from, so
// clients list, bind, format and fill them through the daemon and never
// open /dev/vfio themselves.
//
//	GET  /strata/v1/devices                  any peer  DeviceList
//	GET  /strata/v1/devices/stats[?bdf=BDF]  any peer  DeviceStats
//	GET  /strata/v1/devices/volume?bdf=&nsid= any peer  VolumeInfo
//	POST /strata/v1/devices/bind             admin     BindRequest → BindResponse
//	POST /strata/v1/devices/unbind           admin     UnbindRequest → UnbindResponse
//	POST /strata/v1/devices/reset            admin     ResetRequest → ResetResponse
//	POST /strata/v1/devices/volume/format    admin     FormatRequest → VolumeInfo
//	POST /strata/v1/devices/pools/write      admin     PoolWriteRequest → PoolWriteResponse
const (
	PathDevices      = "/strata/v1/devices"
	PathDeviceStats  = "/strata/v1/devices/stats"
	PathDeviceBind   = "/strata/v1/devices/bind"
	PathDeviceUnbind = "/strata/v1/devices/unbind"
	PathDeviceReset  = "/strata/v1/devices/reset"
	PathVolume       = "/strata/v1/devices/volume"
	PathVolumeFormat = "/strata/v1/devices/volume/format"
	PathPoolWrite    = "/strata/v1/devices/pools/write"
)

// DeviceList is the response of GET /strata/v1/devices: every NVMe
// controller of the host, whoever drives it.
type DeviceList struct {
	Controllers []Controller `json:"controllers"`
	// VFIO says whether this host can give a controller to the daemon at
	// all; when it cannot, bind fails with 503 and Notes say why.
	VFIO VFIOStatus `json:"vfio"`
}

// VFIOStatus is what the daemon found of the kernel's VFIO interfaces.
type VFIOStatus struct {
	// Available is true when a type1v2 container or iommufd can be opened.
	Available bool     `json:"available"`
	Type1     bool     `json:"type1"`
	IOMMUFD   bool     `json:"iommufd"`
	Notes     []string `json:"notes,omitempty"`
}

// Controller is one NVMe controller (a PCI function).
type Controller struct {
	BDF    string `json:"bdf"`
	Vendor string `json:"vendor"` // PCI vendor ID, 4 hex digits
	Device string `json:"device"` // PCI device ID, 4 hex digits
	// Driver is the kernel driver bound to the function: "nvme" (the host
	// uses it), "vfio-pci" (available to userspace) or "" (none).
	Driver string `json:"driver"`
	// IOMMUGroup is -1 when the function has none (IOMMU off): such a
	// controller cannot be bound.
	IOMMUGroup int `json:"iommu_group"`
	// Model, Serial and Firmware come from Identify Controller when the
	// daemon holds the controller, else from the kernel's nvme driver;
	// empty when neither has it (bound to vfio-pci, not held).
	Model    string `json:"model,omitempty"`
	Serial   string `json:"serial,omitempty"`
	Firmware string `json:"firmware,omitempty"`
	// Namespaces are the namespaces the kernel or the daemon sees.
	Namespaces []Namespace `json:"namespaces"`
	// Users lists why the host still uses the controller (mounted
	// filesystems, swap, stacked devices); bind refuses while it is not
	// empty.
	Users []string `json:"users,omitempty"`
	// Held is true when the daemon has the controller open through its
	// userspace driver (after bind); HeldSince says since when.
	Held      bool       `json:"held"`
	HeldSince *time.Time `json:"held_since,omitempty"`
	// Note explains what can be done with the controller now.
	Note string `json:"note,omitempty"`
}

// Namespace is one namespace of a controller.
type Namespace struct {
	NSID int `json:"nsid"`
	// Disk is the kernel block device ("nvme0n1"); empty when the
	// controller is not on the kernel's nvme driver.
	Disk       string   `json:"disk,omitempty"`
	Bytes      int64    `json:"bytes"`
	BlockSize  int      `json:"block_size"`
	Partitions []string `json:"partitions,omitempty"`
	Mounts     []string `json:"mounts,omitempty"`
	Swap       []string `json:"swap,omitempty"`
	Holders    []string `json:"holders,omitempty"`
	// Volume summarises the strata volume on the namespace when the
	// daemon holds the controller and the namespace is formatted.
	Volume *VolumeSummary `json:"volume,omitempty"`
}

// VolumeSummary is a strata volume at a glance.
type VolumeSummary struct {
	Label      string `json:"label"`
	Extents    int    `json:"extents"`
	UsedBytes  int64  `json:"used_bytes"`
	FreeBytes  int64  `json:"free_bytes"`
	Generation uint64 `json:"generation"`
}

// BindRequest asks the daemon to take a controller from the host: bind it
// to vfio-pci (refused while the host uses it) and open it with the
// userspace driver.
type BindRequest struct {
	BDF string `json:"bdf"`
}

// BindResponse describes the controller once the daemon holds it.
type BindResponse struct {
	Controller Controller `json:"controller"`
	// PreviousDriver is the driver the function had ("nvme", or "vfio-pci"
	// when it was already there).
	PreviousDriver string `json:"previous_driver"`
}

// UnbindRequest asks the daemon to close a controller and give it back to
// a kernel driver.
type UnbindRequest struct {
	BDF string `json:"bdf"`
	// Driver is the kernel driver to bind ("" means "nvme").
	Driver string `json:"driver,omitempty"`
}

// UnbindResponse confirms an unbind.
type UnbindResponse struct {
	BDF string `json:"bdf"`
	// Driver is the driver the function is bound to now.
	Driver string `json:"driver"`
	// WasHeld is true when the daemon had the controller open.
	WasHeld bool `json:"was_held"`
}

// ResetRequest asks the daemon to reset a controller it holds (disable,
// enable, recreate the I/O queues) while it keeps serving: what an
// operator does to a controller that misbehaves without giving it up, and
// how the test-bed resets one in the middle of a model's stream. Commands
// in flight are submitted again once the controller is back, so requests
// streaming from it succeed.
type ResetRequest struct {
	BDF string `json:"bdf"`
}

// ResetResponse reports a finished reset.
type ResetResponse struct {
	BDF string `json:"bdf"`
	// Seconds is how long the reset took.
	Seconds float64 `json:"seconds"`
	// Resubmitted counts the commands that were in flight and were
	// submitted again after it.
	Resubmitted uint64 `json:"resubmitted"`
}

// FormatRequest asks for a new, empty strata volume on a namespace of a
// held controller. Whatever the namespace held is lost.
type FormatRequest struct {
	BDF  string `json:"bdf"`
	NSID int    `json:"nsid"`
	// Label names the volume (at most 64 bytes).
	Label string `json:"label,omitempty"`
	// TableBytes sizes each extent-table slot (0: 1 MiB).
	TableBytes int64 `json:"table_bytes,omitempty"`
	// Force must be set to format over a strata volume that holds extents.
	Force bool `json:"force,omitempty"`
}

// VolumeInfo is a strata volume and its extents.
type VolumeInfo struct {
	BDF        string   `json:"bdf"`
	NSID       int      `json:"nsid"`
	Label      string   `json:"label"`
	Version    uint32   `json:"version"`
	BlockSize  int      `json:"block_size"`
	Bytes      int64    `json:"bytes"`
	DataOffset int64    `json:"data_offset"`
	FreeBytes  int64    `json:"free_bytes"`
	Generation uint64   `json:"generation"`
	Extents    []Extent `json:"extents"`
}

// Extent is one named file stored on a volume.
type Extent struct {
	Name     string    `json:"name"`
	Offset   int64     `json:"offset"`
	Length   int64     `json:"length"`
	Reserved int64     `json:"reserved"`
	XXH3     string    `json:"xxh3"` // 16 hex digits
	Created  time.Time `json:"created"`
}

// PoolWriteRequest asks the daemon to store a prefab pool file
// (engine/prefab's format) on a namespace's strata volume as an extent.
type PoolWriteRequest struct {
	BDF  string `json:"bdf"`
	NSID int    `json:"nsid"`
	// Path is the pool file, resolved like a model path: relative to a
	// configured model directory, or absolute inside one.
	Path string `json:"path"`
	// Name is the extent's name; default: the file's base name.
	Name string `json:"name,omitempty"`
}

// PoolWriteResponse describes the stored, verified extent.
type PoolWriteResponse struct {
	Extent Extent `json:"extent"`
	// Path is the pool file that was written, as the daemon resolved it.
	Path string `json:"path"`
	// Seconds is the time to write and verify; GBps the write rate
	// (Length / Seconds, 10^9 bytes/s).
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gbps"`
}

// DeviceStats is the response of GET /strata/v1/devices/stats: the
// counters of every controller the daemon holds.
type DeviceStats struct {
	Controllers []ControllerStats `json:"controllers"`
}

// ControllerStats are one held controller's counters since it was opened,
// and its rates over the most recent sampling interval.
type ControllerStats struct {
	BDF       string    `json:"bdf"`
	Model     string    `json:"model"`
	HeldSince time.Time `json:"held_since"`
	// Reads and Writes count commands; the byte counts are payload bytes.
	Reads       uint64 `json:"reads"`
	Writes      uint64 `json:"writes"`
	ReadBytes   uint64 `json:"read_bytes"`
	WriteBytes  uint64 `json:"write_bytes"`
	Errors      uint64 `json:"errors"`
	Timeouts    uint64 `json:"timeouts"`
	Aborts      uint64 `json:"aborts"`
	Resets      uint64 `json:"resets"`
	Resubmitted uint64 `json:"resubmitted"`
	// Queues are the I/O queue pairs with their depth and the commands in
	// flight on each now.
	Queues []QueueStats `json:"queues"`
	// DMAMappings and DMABytes are what the daemon has mapped into the
	// controller's IOMMU domain now: its queues, bounce buffers and the
	// DMA staging of the models it streams. They return to the same
	// values once a model is unloaded, however its reads went.
	DMAMappings int    `json:"dma_mappings"`
	DMABytes    uint64 `json:"dma_bytes"`
	// Interval is the rates over the last completed sampling interval
	// (about a second); Average over the whole time held.
	Interval Rates `json:"interval"`
	Average  Rates `json:"average"`
}

// QueueStats is one I/O queue pair.
type QueueStats struct {
	ID       int `json:"id"`
	Depth    int `json:"depth"`
	Inflight int `json:"inflight"`
}

// Rates are throughputs over a span of time.
type Rates struct {
	Seconds float64 `json:"seconds"`
	// ReadGBps and WriteGBps are payload bandwidths in 10^9 bytes/s.
	ReadGBps  float64 `json:"read_gbps"`
	WriteGBps float64 `json:"write_gbps"`
	// ReadIOPS and WriteIOPS are commands per second.
	ReadIOPS  float64 `json:"read_iops"`
	WriteIOPS float64 `json:"write_iops"`
}
