package testbed

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
)

// Guest describes the test-bed guest, from the environment init.sh exports.
type Guest struct {
	// NVMe0 is a controller with two namespaces: nsid 1 with 512-byte
	// blocks (file "nvme0n1") and nsid 2 with 4096-byte blocks ("nvme0n2").
	NVMe0 string
	// NVMe1 is a controller with one 512-byte namespace ("nvme1n1") behind
	// QEMU blkdebug: reads covering BadReadSector and writes covering
	// BadWriteSector fail with a media error (EIO in QEMU).
	NVMe1 string
	// IVSHMEM is an ivshmem-plain device whose BAR2 is the host file
	// "ivshmem" (ShmBytes long, zero at boot).
	IVSHMEM string
	// NSBytes is the size of every namespace image.
	NSBytes int64
	// ShmBytes is the size of the ivshmem BAR.
	ShmBytes int64
	// BadReadSector and BadWriteSector are in 512-byte units of nvme1n1.
	BadReadSector, BadWriteSector int64
	// Kernel is the guest kernel version.
	Kernel string
	// Models describes the controller that holds a real model on a strata
	// volume; its NVMe is "" when the host had no model to put there.
	Models Models
}

// Models is a third controller (on vfio-pci at boot) with one 4 KiB-block
// namespace formatted by the host as a strata volume that holds the
// prefabbed gocode-29m pool, behind QEMU blkdebug: the first read covering
// FaultSector fails (once) with a media error. The same pool file and the
// model's golden continuations are in the guest's file system.
type Models struct {
	NVMe string
	// Drive is the QEMU drive ID of its namespace, for Monitor commands
	// such as `qemu-io DRIVE "break read_aio TAG"`. Its reads are
	// throttled (32 MiB/s) so that commands stay in flight a while.
	Drive string
	// Extent is the pool's extent name on namespace 1.
	Extent string
	// Pool is the same pool as a file; Golden the model's golden file.
	Pool, Golden string
	// FaultLayer is the layer whose extent holds FaultSector (512-byte
	// units, blkdebug's).
	FaultLayer  int
	FaultSector int64
}

// Controllers is how many NVMe controllers the guest has.
func (g Guest) Controllers() int {
	if g.Models.NVMe != "" {
		return 3
	}
	return 2
}

// File tags: the host fills each image with Pattern(tag, offset).
const (
	TagNVMe0n1 = 1
	TagNVMe0n2 = 2
	TagNVMe1n1 = 3
)

// Files names the backing files the host can check, as used by Expect.
var Files = []string{"nvme0n1", "nvme0n2", "nvme1n1", "ivshmem"}

// Require skips the test unless it runs inside the test-bed guest (env
// STRATA_TESTBED=1 and /dev/vfio present) and returns the guest description.
func Require(t testing.TB) Guest {
	t.Helper()
	if os.Getenv("STRATA_TESTBED") != "1" {
		t.Skip("needs the VM test-bed (setup/testbed/run.sh sets STRATA_TESTBED=1 inside the guest)")
	}
	if _, err := os.Stat("/dev/vfio/vfio"); err != nil {
		t.Skipf("test-bed variable set but /dev/vfio/vfio missing: %v", err)
	}
	g, err := FromEnv()
	if err != nil {
		t.Fatalf("test-bed environment: %v", err)
	}
	return g
}

// FromEnv reads the guest description from the environment.
func FromEnv() (Guest, error) {
	g := Guest{
		NVMe0:   os.Getenv("STRATA_TESTBED_NVME0"),
		NVMe1:   os.Getenv("STRATA_TESTBED_NVME1"),
		IVSHMEM: os.Getenv("STRATA_TESTBED_IVSHMEM"),
		Kernel:  os.Getenv("STRATA_TESTBED_KERNEL"),
	}
	var errs []error
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"STRATA_TESTBED_NS_BYTES", &g.NSBytes},
		{"STRATA_TESTBED_SHM_BYTES", &g.ShmBytes},
		{"STRATA_TESTBED_BAD_READ_SECTOR", &g.BadReadSector},
		{"STRATA_TESTBED_BAD_WRITE_SECTOR", &g.BadWriteSector},
	} {
		v, err := strconv.ParseInt(os.Getenv(f.name), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
		}
		*f.dst = v
	}
	if g.NVMe0 == "" || g.NVMe1 == "" || g.IVSHMEM == "" {
		errs = append(errs, errors.New("device addresses missing"))
	}
	if m := os.Getenv("STRATA_TESTBED_MODELS_NVME"); m != "" {
		g.Models = Models{NVMe: m, Drive: os.Getenv("STRATA_TESTBED_MODELS_DRIVE"), Extent: os.Getenv("STRATA_TESTBED_MODELS_EXTENT"),
			Pool: os.Getenv("STRATA_TESTBED_MODELS_POOL"), Golden: os.Getenv("STRATA_TESTBED_MODELS_GOLDEN")}
		l, err1 := strconv.Atoi(os.Getenv("STRATA_TESTBED_MODELS_FAULT_LAYER"))
		sec, err2 := strconv.ParseInt(os.Getenv("STRATA_TESTBED_MODELS_FAULT_SECTOR"), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("models controller: %w", err))
		}
		g.Models.FaultLayer, g.Models.FaultSector = l, sec
	}
	return g, errors.Join(errs...)
}

// PatternWord is the 8-byte little-endian word the host writes at byte
// offset off (a multiple of 8) of the image tagged tag: the tag in the top
// byte and the offset below it, so a word read back names where it came
// from.
func PatternWord(tag int, off int64) uint64 { return uint64(tag)<<56 | uint64(off) }

// Pattern fills b with the image pattern of tag starting at byte offset off
// (any alignment).
func Pattern(tag int, off int64, b []byte) {
	var w [8]byte
	for i := 0; i < len(b); {
		pos := off + int64(i)
		base := pos &^ 7
		binary.LittleEndian.PutUint64(w[:], PatternWord(tag, base))
		n := copy(b[i:], w[pos-base:])
		i += n
	}
}

// Out is where Expect writes its lines: the guest's console, which the host
// captures.
var Out io.Writer = os.Stdout

// Expect asks the host to check, after the guest powers off, that file
// (one of Files) holds data at offset. Use it for bytes a device wrote
// through DMA or a BAR store: the host reads its own copy.
func Expect(t testing.TB, file string, offset int64, data []byte) {
	t.Helper()
	expect(t, "TESTBED-EXPECT", file, offset, data)
}

// ExpectNot asks the host to check that file does NOT hold data at offset
// (a DMA the IOMMU must have blocked).
func ExpectNot(t testing.TB, file string, offset int64, data []byte) {
	t.Helper()
	expect(t, "TESTBED-EXPECT-NOT", file, offset, data)
}

func expect(t testing.TB, kind, file string, offset int64, data []byte) {
	ok := false
	for _, f := range Files {
		ok = ok || f == file
	}
	if !ok || offset < 0 || len(data) == 0 {
		t.Fatalf("%s: bad file %q, offset %d or length %d", kind, file, offset, len(data))
	}
	sum := sha256.Sum256(data)
	fmt.Fprintf(Out, "\n%s %s %d %d %s %s\n", kind, file, offset, len(data), hex.EncodeToString(sum[:]), t.Name())
}
