package p2p_test

// Test-bed integration: targets for QEMU's NVMe (nvme0) in the guest —
// locked host memory (4 KiB and 2 MiB pages) and the ivshmem BAR2, mapped
// through its VFIO fd and through sysfs resource2 — each admitted by the
// self-test, with the BAR's bytes checked by the host in the ivshmem
// backing file. Skips outside the test-bed.

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/vfiobus"
	"github.com/strata-llm/strata/p2p"
	"github.com/strata-llm/strata/setup/testbed"
	"github.com/strata-llm/strata/vfio"
)

type guestRig struct {
	dom *vfio.Domain
	bus *vfiobus.Bus
	c   *nvme.Controller
}

func openGuest(t *testing.T, g testbed.Guest) *guestRig {
	dom, err := vfio.NewDomain(vfio.DomainOptions{Backend: vfio.BackendType1})
	if err != nil {
		t.Fatal(err)
	}
	bus, err := vfiobus.Open(dom, g.NVMe0)
	if err != nil {
		dom.Close()
		t.Fatal(err)
	}
	c, err := nvme.Open(ctx, nvme.Config{MMIO: bus, DMA: bus})
	if err != nil {
		bus.Close()
		dom.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c.Close(cctx)
		bus.Close()
		dom.Close()
	})
	return &guestRig{dom, bus, c}
}

func TestTestbedHostPinned(t *testing.T) {
	g := testbed.Require(t)
	r := openGuest(t, g)
	for _, huge := range []bool{false, true} {
		h, err := p2p.NewHostPinned(r.dom, 4<<20, p2p.HostOptions{Huge: huge})
		if err != nil {
			t.Fatalf("huge=%v: %v", huge, err)
		}
		res, err := p2p.SelfTest(ctx, r.c, r.bus, p2p.Scratch{NSID: 1, LBA: 2048, Blocks: 256}, h)
		if err != nil || !res.OK {
			t.Fatalf("%s: %+v %v", h.Name(), res, err)
		}
		b, err := h.Buffer()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.c.ReadBlocks(ctx, 1, 8192, b.Slice(4096, 2<<20)); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 2<<20)
		testbed.Pattern(testbed.TagNVMe0n1, 8192*512, want)
		if string(h.Bytes()[4096:4096+2<<20]) != string(want) {
			t.Fatalf("%s: wrong bytes after an admitted read", h.Name())
		}
		t.Logf("%s admitted: %+v", h.Name(), res)
		h.Close()
	}
}

// TestTestbedPeerBAR moves NVMe data into the ivshmem BAR, mapped into the
// NVMe's domain through the ivshmem's own VFIO fd and through sysfs; the
// host then finds the bytes in the ivshmem backing file.
func TestTestbedPeerBAR(t *testing.T) {
	g := testbed.Require(t)
	r := openGuest(t, g)
	// The sysfs route runs to completion first: when vfio-pci claims the
	// BAR for its own mmap, the kernel revokes sysfs mappings of it (and
	// refuses new ones), so the two CPU mappings cannot coexist.
	open := []struct {
		name   string
		mapBAR func() ([]byte, func() error, error)
	}{
		{"sysfs", func() ([]byte, func() error, error) { return p2p.MapSysfsBAR("", g.IVSHMEM, 2) }},
		{"vfio", func() ([]byte, func() error, error) {
			iv, err := r.dom.OpenPCI(g.IVSHMEM)
			if err != nil {
				return nil, nil, err
			}
			bar, err := iv.MapRegion(2)
			if err != nil {
				iv.Close()
				return nil, nil, err
			}
			return bar, iv.Close, nil
		}},
	}
	for i, o := range open {
		mem, release, err := o.mapBAR()
		if err != nil {
			t.Fatalf("map ivshmem BAR2 through %s: %v", o.name, err)
		}
		p, err := p2p.NewPeerBAR(r.dom, mem, g.IVSHMEM+"/bar2/"+o.name, release)
		if err != nil {
			release()
			t.Fatal(err)
		}
		if _, err := p.Buffer(); err == nil {
			t.Fatal("BAR usable before its self-test")
		}
		res, err := p2p.SelfTest(ctx, r.c, r.bus, p2p.Scratch{NSID: 1, LBA: 4096, Blocks: 64}, p)
		if err != nil || !res.OK {
			t.Fatalf("%s: %+v %v", p.Name(), res, err)
		}
		b, err := p.Buffer()
		if err != nil {
			t.Fatal(err)
		}
		// 1 MiB of nvme0n1 at image offset 16 MiB + i MiB into BAR offset
		// 8 MiB + i*2 MiB + 512 (unaligned: PRP lists across BAR pages).
		imgOff := int64(16<<20 + i<<20)
		barOff := 8<<20 + i*2<<20 + 512
		if err := r.c.ReadBlocks(ctx, 1, uint64(imgOff/512), b.Slice(barOff, 1<<20)); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 1<<20)
		testbed.Pattern(testbed.TagNVMe0n1, imgOff, want)
		if string(p.Bytes()[barOff:barOff+1<<20]) != string(want) {
			t.Fatalf("%s: BAR bytes differ in the guest", p.Name())
		}
		sum := sha256.Sum256(want)
		t.Logf("%s: nvme0n1[%d:+1MiB] → BAR2 offset %d, sha256 %x (host checks ivshmem file)", p.Name(), imgOff, barOff, sum)
		testbed.Expect(t, "ivshmem", int64(barOff), want)
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
}

// lying maps nothing: the controller's DMA to its IOVA is blocked by the
// IOMMU, which QEMU reports as success; the self-test must refuse it.
type lying struct{}

func (lying) MapDMA([]byte) (uint64, error) { return 0x71_0000_0000, nil }
func (lying) UnmapDMA(uint64) error         { return nil }

func TestTestbedSelfTestRefusesBlockedRoute(t *testing.T) {
	g := testbed.Require(t)
	r := openGuest(t, g)
	mem := make([]byte, 1<<20)
	p, err := p2p.NewPeerBAR(lying{}, mem, "unmapped", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p2p.SelfTest(ctx, r.c, r.bus, p2p.Scratch{NSID: 1, LBA: 4096, Blocks: 64}, p)
	t.Logf("blocked route: %+v, %v", res, err)
	if err == nil || res.OK {
		t.Fatal("a route the IOMMU blocks was admitted")
	}
}
