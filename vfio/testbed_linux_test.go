package vfio

// Integration tests that run as root inside the VM test-bed guest
// (setup/testbed/run.sh): a QEMU q35 machine with intel-iommu, two emulated
// NVMe controllers and an ivshmem device, all bound to vfio-pci by the
// guest's init. Outside the guest they skip.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/strata-llm/strata/setup/testbed"
	"golang.org/x/sys/unix"
)

// NVMe controller registers (NVM Express Base Specification 1.4, 3.1).
const (
	regCAP  = 0x00
	regVS   = 0x08
	regCC   = 0x14
	regCSTS = 0x1c
	regAQA  = 0x24
	regASQ  = 0x28
	regACQ  = 0x30
)

func TestTestbedContainerGroupDevice(t *testing.T) {
	g := testbed.Require(t)
	sys := Sysfs{}
	n, err := sys.IOMMUGroup(g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenContainer()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.APIVersion(); err != nil || v != 0 {
		t.Fatalf("API version %d, %v", v, err)
	}
	for _, ext := range []struct {
		e    Extension
		want bool
	}{{ExtType1v2, true}, {ExtType1, true}, {ExtNoIOMMU, false}} {
		if ok, err := c.CheckExtension(ext.e); err != nil || ok != ext.want {
			t.Errorf("CheckExtension(%d) = %v, %v; want %v", ext.e, ok, err, ext.want)
		}
	}
	if _, err := c.MapDMA(make([]byte, 4096)); err == nil {
		t.Error("MapDMA before SetIOMMU succeeded")
	}
	grp, err := OpenGroup(n)
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	st, err := grp.Status()
	if err != nil || !st.Viable || st.ContainerSet {
		t.Fatalf("fresh group status %+v, %v", st, err)
	}
	if err := grp.SetContainer(c); err != nil {
		t.Fatal(err)
	}
	if st, _ := grp.Status(); !st.ContainerSet {
		t.Fatal("group status does not show the container")
	}
	if err := c.SetIOMMU(ExtType1v2); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("IOMMU info: page sizes %#x, ranges %v, DMA avail %d, caps %v", info.PageSizes, info.Ranges, info.DMAAvail, info.Caps)
	if len(info.Ranges) == 0 || info.MinPageSize() != 4096 || info.DMAAvail <= 0 {
		t.Fatalf("IOMMU info incomplete: %+v", info)
	}
	for _, r := range info.Ranges {
		if r.Start <= 0xfee00000 && 0xfee00000 <= r.End {
			t.Errorf("range %v includes the MSI window", r)
		}
	}
	if want := []Range{{0, 0xfedfffff}, {0xfef00000, 0x7fffffffff}}; len(info.Ranges) != 2 || info.Ranges[0] != want[0] || info.Ranges[1] != want[1] {
		t.Logf("note: ranges differ from those recorded earlier (%v)", want)
	}
	if _, err := grp.OpenDevice("0000:00:1f.7"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("OpenDevice of a device outside the group: %v, want ErrNoDevice", err)
	}
	start := time.Now()
	dev, err := grp.OpenDevice(g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GET_DEVICE_FD took %v", time.Since(start))
	di := dev.Info()
	if !di.PCI || di.NumRegions < 9 || di.NumIRQs < 3 {
		t.Errorf("device info %+v", di)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenGroup(4000); !errors.Is(err, ErrNoDevice) {
		t.Errorf("OpenGroup(4000): %v, want ErrNoDevice", err)
	}
}

// vmLockedKB reads VmLck from /proc/self/status: type1 charges pinned DMA
// pages to it, so it shows what the kernel still has mapped.
func vmLockedKB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmLck:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	t.Fatal("no VmLck in /proc/self/status")
	return 0
}

func TestTestbedMapAccounting(t *testing.T) {
	g := testbed.Require(t)
	lock0 := vmLockedKB(t)
	dom, err := NewDomain(DomainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	if dom.Backend() != BackendType1 {
		t.Fatalf("backend %v; Debian's kernel has no iommufd", dom.Backend())
	}
	if _, err := dom.OpenPCI(g.NVMe0); err != nil {
		t.Fatal(err)
	}
	info0, err := dom.Container().Info()
	if err != nil {
		t.Fatal(err)
	}
	small, err := AllocDMA(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(small)
	mid, err := AllocDMA(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(mid)
	huge, err := AllocDMA(4<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(huge)
	var iovas []uint64
	for _, b := range [][]byte{small, mid, huge} {
		iova, err := dom.MapDMA(b)
		if err != nil {
			t.Fatal(err)
		}
		iovas = append(iovas, iova)
	}
	t.Logf("IOVAs %#x", iovas)
	if iovas[2]%(2<<20) != 0 {
		t.Errorf("hugepage buffer at IOVA %#x, not 2 MiB aligned", iovas[2])
	}
	st := dom.Stats()
	if st.Mappings != 3 || st.Bytes != 4096+1<<20+4<<20 {
		t.Fatalf("stats %+v", st)
	}
	info1, _ := dom.Container().Info()
	if info0.DMAAvail-info1.DMAAvail != 3 {
		t.Errorf("kernel DMA budget went from %d to %d after 3 maps", info0.DMAAvail, info1.DMAAvail)
	}
	if got := vmLockedKB(t) - lock0; got != (4096+1<<20+4<<20)>>10 {
		t.Errorf("kernel pinned %d KiB, want %d", got, (4096+1<<20+4<<20)>>10)
	}
	if err := dom.UnmapDMA(iovas[1]); err != nil {
		t.Fatal(err)
	}
	if err := dom.UnmapDMA(iovas[1]); err == nil {
		t.Fatal("double unmap succeeded")
	}
	// A read-only mapping and a fixed IOVA.
	ro, err := dom.Map(mid, MapOptions{Perm: PermRead, FixedIOVA: true, IOVA: 0x40000000})
	if err != nil || ro != 0x40000000 {
		t.Fatalf("fixed read-only map: %#x, %v", ro, err)
	}
	// IOVAs inside the MSI window are refused by the allocator.
	if _, err := dom.Map(small[:0:0], MapOptions{}); err == nil {
		t.Error("empty map accepted")
	}
	if _, err := dom.Map(mid, MapOptions{FixedIOVA: true, IOVA: 0xfee00000}); err == nil {
		t.Error("map into the MSI window accepted")
	}
	if err := dom.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vmLockedKB(t); got != lock0 {
		t.Errorf("after Close the kernel still pins %d KiB (was %d): mappings leaked", got, lock0)
	}
}

// nvmeAdmin is just enough of an NVMe admin queue to make the controller
// DMA: it proves that MapDMA, Bus Master, MSI-X and the IOMMU behave. The
// real driver is nvme/.
type nvmeAdmin struct {
	t       *testing.T
	regs    *MMIO
	sq, cq  []byte
	sqTail  uint32
	cqHead  uint32
	phase   uint32
	cid     uint16
	timeout time.Duration
}

func startAdmin(t *testing.T, dom *Domain, dev *Device) *nvmeAdmin {
	t.Helper()
	bar, err := dev.MapRegion(RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := NewMMIO(bar)
	if err != nil {
		t.Fatal(err)
	}
	if cmd, err := dev.EnableDMA(); err != nil || cmd&PCICommandBusMaster == 0 {
		t.Fatalf("enable DMA: %#x, %v", cmd, err)
	}
	a := &nvmeAdmin{t: t, regs: regs, phase: 1}
	a.timeout = time.Duration(regs.Read64(regCAP)>>24&0xff) * 500 * time.Millisecond
	regs.Write32(regCC, 0)
	a.waitReady(false)
	for _, p := range []*[]byte{&a.sq, &a.cq} {
		if *p, err = AllocDMA(4096, false); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { FreeDMA(a.sq); FreeDMA(a.cq) })
	sqIOVA, err := dom.MapDMA(a.sq)
	if err != nil {
		t.Fatal(err)
	}
	cqIOVA, err := dom.MapDMA(a.cq)
	if err != nil {
		t.Fatal(err)
	}
	regs.Write32(regAQA, 63<<16|63) // 64-entry admin queues
	regs.Write64(regASQ, sqIOVA)
	regs.Write64(regACQ, cqIOVA)
	regs.Write32(regCC, 1|6<<16|4<<20) // EN, IOSQES 64 B, IOCQES 16 B, 4 KiB pages
	a.waitReady(true)
	return a
}

func (a *nvmeAdmin) waitReady(ready bool) {
	deadline := time.Now().Add(a.timeout + time.Second)
	for (a.regs.Read32(regCSTS)&1 == 1) != ready {
		if time.Now().After(deadline) {
			a.t.Fatalf("CSTS.RDY did not become %v (CSTS %#x)", ready, a.regs.Read32(regCSTS))
		}
		time.Sleep(time.Millisecond)
	}
}

// identify submits Identify (CNS 1: controller) with PRP1 = iova and waits
// for its completion, by polling or, with efd, by MSI-X vector 0. It
// returns the completion status field.
func (a *nvmeAdmin) identify(iova uint64, efd *EventFD) uint16 {
	a.cid++
	e := a.sq[a.sqTail*64 : a.sqTail*64+64]
	clear(e)
	binary.LittleEndian.PutUint32(e[0:], 0x06|uint32(a.cid)<<16)
	binary.LittleEndian.PutUint64(e[24:], iova)
	binary.LittleEndian.PutUint32(e[40:], 1)
	a.sqTail = (a.sqTail + 1) % 64
	a.regs.Write32(0x1000, a.sqTail) // SQ 0 tail doorbell (DSTRD 0)
	if efd != nil {
		if _, err := efd.Wait(a.timeout + time.Second); err != nil {
			a.t.Fatalf("no MSI-X interrupt for the admin completion: %v", err)
		}
	}
	deadline := time.Now().Add(a.timeout + time.Second)
	dw3 := (*uint32)(unsafe.Pointer(&a.cq[a.cqHead*16+12]))
	for {
		v := atomic.LoadUint32(dw3)
		if v>>16&1 == a.phase {
			if uint16(v) != a.cid {
				a.t.Fatalf("completion for command %d, want %d", uint16(v), a.cid)
			}
			a.cqHead++
			if a.cqHead == 64 {
				a.cqHead, a.phase = 0, a.phase^1
			}
			a.regs.Write32(0x1004, a.cqHead) // CQ 0 head doorbell
			return uint16(v >> 17)
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("Identify timed out (CSTS %#x)", a.regs.Read32(regCSTS))
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (a *nvmeAdmin) shutdown() {
	a.regs.Write32(regCC, a.regs.Read32(regCC)&^1)
	a.waitReady(false)
}

func TestTestbedBAR0AndConfig(t *testing.T) {
	g := testbed.Require(t)
	dom, err := NewDomain(DomainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	dev, err := dom.OpenPCI(g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := dev.ReadConfig32(0); err != nil || id != 0x00101b36 {
		t.Fatalf("vendor/device %#x, %v; want QEMU NVMe 1b36:0010", id, err)
	}
	ri, err := dev.RegionInfo(RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BAR0 %+v", ri)
	if !ri.Mmap || ri.Size < 0x2000 {
		t.Fatalf("BAR0 region %+v", ri)
	}
	cfg, err := dev.RegionInfo(RegionConfig)
	if err != nil || cfg.Size < 256 || cfg.Mmap {
		t.Fatalf("config region %+v, %v", cfg, err)
	}
	bar, err := dev.MapRegion(RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	regs, _ := NewMMIO(bar)
	capReg, vs := regs.Read64(regCAP), regs.Read32(regVS)
	t.Logf("CAP %#x VS %#x", capReg, vs)
	if mqes := capReg & 0xffff; mqes != 2047 {
		t.Errorf("CAP.MQES %d, want 2047 (QEMU)", mqes)
	}
	if capReg>>37&1 != 1 {
		t.Error("CAP.CSS lacks the NVM command set")
	}
	if vs>>16 != 1 || vs>>8&0xff < 2 {
		t.Errorf("VS %#x, want NVMe 1.2 or later", vs)
	}
	cmd, err := dev.UpdateCommand(0, PCICommandBusMaster)
	if err != nil || cmd&PCICommandBusMaster != 0 {
		t.Fatalf("clearing Bus Master: %#x, %v", cmd, err)
	}
	cmd, err = dev.EnableDMA()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint16(PCICommandMemory | PCICommandBusMaster | PCICommandINTxDisable); cmd&want != want {
		t.Fatalf("Command %#x after EnableDMA", cmd)
	}
	// Reset: a controller that was enabled comes back disabled. (The
	// kernel saves and restores config space around the reset, so the
	// Command register keeps Bus Master.)
	if !dev.Info().CanReset {
		t.Fatal("QEMU's NVMe should support reset")
	}
	startAdmin(t, dom, dev)
	if regs.Read32(regCC)&1 != 1 || regs.Read32(regCSTS)&1 != 1 {
		t.Fatalf("controller not enabled before reset: CC %#x CSTS %#x", regs.Read32(regCC), regs.Read32(regCSTS))
	}
	method, _ := os.ReadFile(filepath.Join("/sys/bus/pci/devices", g.NVMe0, "reset_method"))
	start := time.Now()
	if err := dev.Reset(); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset (kernel methods %q) took %v", strings.TrimSpace(string(method)), time.Since(start))
	if cc, csts := regs.Read32(regCC), regs.Read32(regCSTS); cc&1 != 0 || csts&1 != 0 {
		t.Errorf("after reset CC %#x CSTS %#x, want the controller disabled", cc, csts)
	}
}

func TestTestbedMSIX(t *testing.T) {
	g := testbed.Require(t)
	dom, err := NewDomain(DomainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	dev, err := dom.OpenPCI(g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	ii, err := dev.IRQInfo(IRQMSIX)
	if err != nil || !ii.EventFD || ii.Count < 4 {
		t.Fatalf("MSI-X info %+v, %v", ii, err)
	}
	t.Logf("MSI-X %+v", ii)
	if _, err := dev.EnableMSIX(ii.Count + 1); err == nil {
		t.Error("more vectors than the device has were accepted")
	}
	efds, err := dev.EnableMSIX(4)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.TriggerMSIX(2); err != nil {
		t.Fatal(err)
	}
	if n, err := efds[2].Wait(2 * time.Second); err != nil || n != 1 {
		t.Fatalf("vector 2: %d, %v", n, err)
	}
	for i, e := range efds {
		if n, _ := e.Poll(); n != 0 {
			t.Errorf("vector %d signalled %d times unprompted", i, n)
		}
	}
	// A real interrupt: the admin completion raises vector 0.
	a := startAdmin(t, dom, dev)
	buf, err := AllocDMA(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(buf)
	iova, err := dom.MapDMA(buf)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.identify(iova, efds[0]); st != 0 {
		t.Fatalf("Identify status %#x", st)
	}
	if mn := strings.TrimSpace(string(buf[24:64])); mn != "QEMU NVMe Ctrl" {
		t.Fatalf("model number %q", mn)
	}
	a.shutdown()
	if err := dev.DisableMSIX(); err != nil {
		t.Fatal(err)
	}
}

// TestTestbedPeerBAR maps the ivshmem BAR into the NVMe's domain and has the
// NVMe DMA an Identify page into it: the p2p PeerBAR path, checked on the
// host in the ivshmem backing file. It also shows the IOMMU blocking a DMA
// to an IOVA that was never mapped and a write into a read-only mapping.
func TestTestbedPeerBAR(t *testing.T) {
	g := testbed.Require(t)
	dom, err := NewDomain(DomainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	nvme, err := dom.OpenPCI(g.NVMe0)
	if err != nil {
		t.Fatal(err)
	}
	shm, err := dom.OpenPCI(g.IVSHMEM)
	if err != nil {
		t.Fatal(err)
	}
	bar, err := shm.MapRegion(2)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(bar)) != g.ShmBytes {
		t.Fatalf("ivshmem BAR2 is %d bytes, want %d", len(bar), g.ShmBytes)
	}
	// CPU stores through the BAR land in the host file.
	msg := []byte("strata vfio: written through the ivshmem BAR mmap")
	copy(bar[1<<20:], msg)
	testbed.Expect(t, "ivshmem", 1<<20, msg)

	start := time.Now()
	barIOVA, err := dom.MapDMA(bar)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mapped the %d MiB BAR at IOVA %#x in %v", len(bar)>>20, barIOVA, time.Since(start))

	a := startAdmin(t, dom, nvme)
	const off = 2 << 20
	if st := a.identify(barIOVA+off, nil); st != 0 {
		t.Fatalf("Identify into the BAR: status %#x", st)
	}
	page := append([]byte(nil), bar[off:off+4096]...)
	if mn := strings.TrimSpace(string(page[24:64])); mn != "QEMU NVMe Ctrl" {
		t.Fatalf("Identify in the BAR reads model %q", mn)
	}
	testbed.Expect(t, "ivshmem", off, page)

	// A DMA to an IOVA that was never mapped: QEMU completes it with
	// success, the IOMMU drops it and logs a DMAR fault. (One at a time:
	// the emulated IOMMU drops a fault that arrives while the previous one
	// is still pending.)
	unmapped := uint64(0x7000000000)
	logBefore, _ := testbed.KernelLog()
	if st := a.identify(unmapped, nil); st != 0 {
		t.Logf("Identify to an unmapped IOVA: status %#x", st)
	}
	waitFault(t, len(logBefore), unmapped)
	// A write into a read-only mapping is dropped the same way.
	ro, err := AllocDMA(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(ro)
	roIOVA, err := dom.Map(ro, MapOptions{Perm: PermRead})
	if err != nil {
		t.Fatal(err)
	}
	logBefore, _ = testbed.KernelLog()
	a.identify(roIOVA, nil)
	if !bytes.Equal(ro, make([]byte, 4096)) {
		t.Error("the device wrote into a read-only mapping")
	}
	waitFault(t, len(logBefore), roIOVA)
	a.shutdown()
	if err := dom.UnmapDMA(barIOVA); err != nil {
		t.Fatal(err)
	}
}

// waitFault waits for the kernel to log a DMAR fault at iova after the
// first skip log lines.
func waitFault(t *testing.T, skip int, iova uint64) {
	t.Helper()
	want := fmt.Sprintf("fault addr %#x ", iova)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		lines, err := testbed.KernelLog()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines[min(skip, len(lines)):] {
			if strings.Contains(l, "DMAR") && strings.Contains(l, want) {
				t.Logf("kernel: %s", l)
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("no DMAR fault logged for IOVA %#x", iova)
}

// TestTestbedUnbindRebind moves NVMe1 to the kernel's nvme driver, reads its
// namespace through the block layer (the host's pattern, and blkdebug's
// injected error at the bad sector), and moves it back to vfio-pci.
func TestTestbedUnbindRebind(t *testing.T) {
	g := testbed.Require(t)
	sys := Sysfs{}
	prev, err := sys.Bind(g.NVMe1, "nvme")
	if err != nil {
		t.Fatal(err)
	}
	if prev != "vfio-pci" {
		t.Errorf("previous driver %q", prev)
	}
	defer func() {
		if _, err := sys.BindVFIO(g.NVMe1); err != nil {
			t.Fatalf("binding back to vfio-pci: %v", err)
		}
		dom, err := NewDomain(DomainOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer dom.Close()
		if _, err := dom.OpenPCI(g.NVMe1); err != nil {
			t.Fatalf("opening after rebind: %v", err)
		}
	}()
	var disk string
	deadline := time.Now().Add(30 * time.Second)
	for disk == "" {
		m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", g.NVMe1, "nvme/nvme*/nvme*n1"))
		if len(m) > 0 {
			if _, err := os.Stat("/dev/" + filepath.Base(m[0])); err == nil {
				disk = "/dev/" + filepath.Base(m[0])
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the kernel nvme driver created no namespace block device")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("kernel nvme driver: %s", disk)
	fd, err := unix.Open(disk, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf, err := AllocDMA(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(buf)
	want := make([]byte, 4096)
	off := int64(1 << 20)
	if _, err := unix.Pread(fd, buf, off); err != nil {
		t.Fatal(err)
	}
	testbed.Pattern(testbed.TagNVMe1n1, off, want)
	if !bytes.Equal(buf, want) {
		t.Fatalf("nvme1n1 at %d: %x, want the host's pattern %x", off, buf[:16], want[:16])
	}
	// The kernel turns the NVMe media error into BLK_STS_MEDIUM: ENODATA.
	if _, err := unix.Pread(fd, buf[:512], g.BadReadSector*512); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EIO) {
		t.Errorf("read of the blkdebug sector: %v, want ENODATA or EIO", err)
	}
}

// TestTestbedProbe reports which VFIO interfaces the guest kernel has:
// type1 must work; Debian's 6.12 has no iommufd or VFIO cdev, and with
// BackendAuto the Domain must then fall back to type1.
func TestTestbedProbe(t *testing.T) {
	testbed.Require(t)
	p := Probe()
	t.Logf("probe: type1=%v iommufd=%v cdev=%v notes=%q", p.Type1, p.IOMMUFD, p.Cdev, p.Notes)
	if !p.Type1 {
		t.Fatal("type1 unavailable in the test-bed")
	}
	if _, err := NewDomain(DomainOptions{Backend: BackendIOMMUFD}); p.IOMMUFD {
		if err != nil {
			t.Errorf("iommufd probed present but the domain failed: %v", err)
		}
	} else if !errors.Is(err, ErrNotSupported) {
		t.Errorf("iommufd domain without /dev/iommu: %v, want ErrNotSupported", err)
	}
}
