package nvme_test

// Integration tests against QEMU's NVMe controller in the VM test-bed
// (setup/testbed/run.sh). They skip unless STRATA_TESTBED=1 and /dev/vfio
// exist; inside the guest they drive nvme0 (namespaces 1: 512 B and
// 2: 4 KiB blocks, pre-filled by the host with testbed.Pattern) and nvme1
// (blkdebug media errors) through VFIO with the IOMMU on.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/strata-llm/strata/internal/hostmem"
	"github.com/strata-llm/strata/nvme"
	"github.com/strata-llm/strata/nvme/vfiobus"
	"github.com/strata-llm/strata/setup/testbed"
	"github.com/strata-llm/strata/vfio"
)

// rig is one controller opened through VFIO.
type rig struct {
	dom *vfio.Domain
	bus *vfiobus.Bus
	c   *nvme.Controller
}

func openRig(t testing.TB, bdf string, cfg nvme.Config, msix bool) *rig {
	t.Helper()
	dom, err := vfio.NewDomain(vfio.DomainOptions{Backend: vfio.BackendType1})
	if err != nil {
		t.Fatalf("domain: %v", err)
	}
	bus, err := vfiobus.Open(dom, bdf)
	if err != nil {
		dom.Close()
		t.Fatalf("open %s: %v", bdf, err)
	}
	cfg.MMIO, cfg.DMA = bus, bus
	if cfg.IOQueues == 0 {
		cfg.IOQueues = 1
	}
	if msix {
		irq, err := bus.EnableInterrupts(cfg.IOQueues + 1)
		if err != nil {
			t.Fatalf("MSI-X: %v", err)
		}
		cfg.Interrupts = irq
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "nvme", Level: hclog.Warn, Output: os.Stderr})
	}
	c, err := nvme.Open(context.Background(), cfg)
	if err != nil {
		bus.Close()
		dom.Close()
		t.Fatalf("nvme bring-up on %s: %v", bdf, err)
	}
	r := &rig{dom: dom, bus: bus, c: c}
	t.Cleanup(func() { r.close(t) })
	return r
}

func (r *rig) close(t testing.TB) {
	if r.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.c.Close(ctx); err != nil {
		t.Errorf("nvme close: %v", err)
	}
	if err := r.bus.Close(); err != nil {
		t.Errorf("bus close: %v", err)
	}
	if err := r.dom.Close(); err != nil {
		t.Errorf("domain close: %v", err)
	}
	r.c = nil
}

// checkPattern verifies b against the host's fill pattern of the image
// tagged tag at byte offset off, naming the first bad word.
func checkPattern(t testing.TB, tag int, off int64, b []byte) {
	t.Helper()
	want := make([]byte, len(b))
	testbed.Pattern(tag, off, want)
	if i := firstDiff(b, want); i >= 0 {
		t.Fatalf("byte %d of %d at image offset %d: got %#x, want %#x", i, len(b), off+int64(i), b[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestTestbedBringUp(t *testing.T) {
	g := testbed.Require(t)
	for _, msix := range []bool{false, true} {
		t.Run(fmt.Sprintf("msix=%v", msix), func(t *testing.T) {
			r := openRig(t, g.NVMe0, nvme.Config{IOQueues: 2}, msix)
			info := r.c.Info()
			t.Logf("model %q serial %q fw %q version %s MDTS %d max transfer %d CAP %+v timeout %v",
				info.Model, info.Serial, info.Firmware, r.c.Version(), info.MDTS, r.c.MaxTransfer(), r.c.Capabilities(), r.c.Timeout())
			if info.Model != "QEMU NVMe Ctrl" {
				t.Errorf("model %q", info.Model)
			}
			ns := r.c.Namespaces()
			if ns[1].BlockSize != 512 || ns[1].Size != uint64(g.NSBytes/512) || ns[2].BlockSize != 4096 || ns[2].Size != uint64(g.NSBytes/4096) {
				t.Errorf("namespaces %+v", ns)
			}
			buf, _ := r.bus.Alloc(8192)
			defer r.bus.Free(buf)
			for nsid, tag := range map[uint32]int{1: testbed.TagNVMe0n1, 2: testbed.TagNVMe0n2} {
				if err := r.c.ReadBlocks(context.Background(), nsid, 1, buf); err != nil {
					t.Fatal(err)
				}
				checkPattern(t, tag, int64(ns[nsid].BlockSize), buf.Bytes)
			}
		})
	}
}

// TestTestbedRandomIO reads the host pattern at random LBAs with sizes
// from 512 B to 4 MiB, into buffers at unaligned offsets (PRP lists across
// pages, requests split at MDTS), on both LBA formats; then writes random
// data to the images' last 16 MiB, reads it back, and asks the host to find
// it in the backing files.
func TestTestbedRandomIO(t *testing.T) {
	g := testbed.Require(t)
	// Writes go to consecutive, non-overlapping places (with random gaps)
	// in the last 16 MiB, so that every one can be checked by the host
	// after power-off.
	cursor := map[uint32]int64{1: g.NSBytes - 16<<20, 2: g.NSBytes - 16<<20}
	for _, msix := range []bool{false, true} {
		t.Run(fmt.Sprintf("msix=%v", msix), func(t *testing.T) {
			r := openRig(t, g.NVMe0, nvme.Config{IOQueues: 2, QueueDepth: 32}, msix)
			ctx := context.Background()
			buf, err := r.bus.Alloc(4<<20 + 8192)
			if err != nil {
				t.Fatal(err)
			}
			defer r.bus.Free(buf)
			rng := rand.New(rand.NewPCG(7, uint64(len(t.Name()))))
			sizes := []int{512, 4096, 4096 + 512, 12288, 128 << 10, 512 << 10, 512<<10 + 4096, 1 << 20, 4 << 20}
			offsets := []int{0, 4, 512, 4092}
			writeBase := g.NSBytes - 16<<20
			for _, nsid := range []uint32{1, 2} {
				ns, _ := r.c.Namespace(nsid)
				bs := ns.BlockSize
				tag, file := testbed.TagNVMe0n1, "nvme0n1"
				if nsid == 2 {
					tag, file = testbed.TagNVMe0n2, "nvme0n2"
				}
				for _, size := range sizes {
					if size%bs != 0 {
						continue
					}
					off := offsets[rng.IntN(len(offsets))]
					region := buf.Slice(off, size)
					// Read the host pattern from the first 48 MiB.
					lba := rng.Uint64N(uint64(writeBase)/uint64(bs) - uint64(size/bs))
					if err := r.c.ReadBlocks(ctx, nsid, lba, region); err != nil {
						t.Fatalf("read ns %d lba %d size %d: %v", nsid, lba, size, err)
					}
					checkPattern(t, tag, int64(lba)*int64(bs), region.Bytes)
					// Write random data into the last 16 MiB and read it back.
					cursor[nsid] += int64(rng.IntN(8) * bs)
					wl := uint64(cursor[nsid] / int64(bs))
					cursor[nsid] += int64(size)
					if cursor[nsid] > g.NSBytes {
						t.Fatal("write region exhausted")
					}
					data := make([]byte, size)
					for i := range data {
						data[i] = byte(rng.Uint32())
					}
					copy(region.Bytes, data)
					if err := r.c.WriteBlocks(ctx, nsid, wl, region); err != nil {
						t.Fatalf("write ns %d lba %d size %d: %v", nsid, wl, size, err)
					}
					clear(region.Bytes)
					if err := r.c.ReadBlocks(ctx, nsid, wl, region); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(region.Bytes, data) {
						t.Fatalf("ns %d lba %d size %d: read back differs", nsid, wl, size)
					}
					testbed.Expect(t, file, int64(wl)*int64(bs), data)
					t.Logf("ns %d: read %d B at lba %d (buffer offset %d), wrote+verified %d B at lba %d", nsid, size, lba, off, size, wl)
				}
			}
			st := r.c.Stats()
			t.Logf("stats %+v", st)
		})
	}
}

// TestTestbedQueuesDepth32: four queue pairs, each with 32 reads in
// flight, checked against the host pattern.
func TestTestbedQueuesDepth32(t *testing.T) {
	g := testbed.Require(t)
	for _, msix := range []bool{false, true} {
		t.Run(fmt.Sprintf("msix=%v", msix), func(t *testing.T) {
			r := openRig(t, g.NVMe0, nvme.Config{IOQueues: 4, QueueDepth: 33}, msix)
			qs := r.c.Queues()
			if len(qs) != 4 {
				t.Fatalf("%d queues", len(qs))
			}
			const per, size = 32, 16 << 10
			var wg sync.WaitGroup
			var maxInflight [4]int
			for qi, q := range qs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf, err := r.bus.Alloc(per * size)
					if err != nil {
						t.Error(err)
						return
					}
					defer r.bus.Free(buf)
					for round := 0; round < 2; round++ {
						var ts []*nvme.Ticket
						var lbas []uint64
						for i := 0; i < per; i++ {
							lba := uint64(((qi*per*2+round*per+i)*size)%(32<<20)) / 512
							tk, err := q.Read(context.Background(), 1, lba, buf.Slice(i*size, size))
							if err != nil {
								t.Error(err)
								return
							}
							ts, lbas = append(ts, tk), append(lbas, lba)
							maxInflight[qi] = max(maxInflight[qi], q.Inflight())
						}
						for i, tk := range ts {
							if err := tk.Wait(); err != nil {
								t.Error(err)
								return
							}
							checkPattern(t, testbed.TagNVMe0n1, int64(lbas[i])*512, buf.Bytes[i*size:(i+1)*size])
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("max in flight per queue %v; stats %+v", maxInflight, r.c.Stats())
		})
	}
}

// TestTestbedUnmappedIOVA points a READ and a WRITE at an IOVA that was
// never mapped. QEMU completes them (often with success); the IOMMU must
// have blocked the DMA: the guest kernel logs a DMAR fault, the READ's
// memory does not receive the data, and the host finds the WRITE's data
// absent from the image.
func TestTestbedUnmappedIOVA(t *testing.T) {
	g := testbed.Require(t)
	r := openRig(t, g.NVMe0, nvme.Config{}, false)
	ctx := context.Background()
	before, _ := testbed.KernelLog()
	const bogus = 0x70_0000_0000 // 448 GiB: inside the 39-bit valid range, far above any allocation
	mem := make([]byte, 8192)
	for i := range mem {
		mem[i] = 0xa5
	}
	rerr := r.c.ReadBlocks(ctx, 1, 64, nvme.Buffer{Bytes: mem[:4096], IOVA: bogus})
	t.Logf("read into unmapped IOVA %#x: %v", uint64(bogus), rerr)
	for i, b := range mem[:4096] {
		if b != 0xa5 {
			t.Fatalf("byte %d of the never-mapped buffer changed to %#x", i, b)
		}
	}
	// The WRITE's source bytes live only in Go memory the device cannot
	// reach; make them distinct so the host check is meaningful.
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i*13 + 1)
	}
	copy(mem[4096:], data)
	// 47 MiB into nvme0n1: no other test reads or writes there. QEMU
	// writes whatever its failed DMA read left (zeros), so the pattern is
	// gone but our data must not be there.
	const wlba = 47 << 11
	werr := r.c.WriteBlocks(ctx, 1, wlba, nvme.Buffer{Bytes: mem[4096:], IOVA: bogus + 4096})
	t.Logf("write from unmapped IOVA %#x: %v", uint64(bogus+4096), werr)
	testbed.ExpectNot(t, "nvme0n1", wlba*512, data)
	// The controller and the mapping are still healthy.
	buf, _ := r.bus.Alloc(4096)
	defer r.bus.Free(buf)
	if err := r.c.ReadBlocks(ctx, 1, 64, buf); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, testbed.TagNVMe0n1, 64*512, buf.Bytes)
	time.Sleep(200 * time.Millisecond) // let the fault reach the log
	after, err := testbed.KernelLog()
	if err != nil {
		t.Fatal(err)
	}
	var faults []string
	for _, l := range after[min(len(before), len(after)):] {
		if strings.Contains(l, "DMAR") && (strings.Contains(strings.ToLower(l), "fault") || strings.Contains(l, "PTE")) {
			faults = append(faults, l)
		}
	}
	for _, f := range faults {
		t.Logf("kernel: %s", f)
	}
	if len(faults) == 0 {
		t.Fatal("no DMAR fault logged for a DMA to an unmapped IOVA")
	}
}

// TestTestbedMediaErrors reads and writes across nvme1's blkdebug bad
// sectors: typed media errors, and no wrong byte in the buffer.
func TestTestbedMediaErrors(t *testing.T) {
	g := testbed.Require(t)
	r := openRig(t, g.NVMe1, nvme.Config{}, false)
	ctx := context.Background()
	buf, _ := r.bus.Alloc(64 << 10)
	defer r.bus.Free(buf)
	const sentinel = 0x5a
	for i := range buf.Bytes {
		buf.Bytes[i] = sentinel
	}
	lba := uint64(g.BadReadSector - 16)
	err := r.c.ReadBlocks(ctx, 1, lba, buf.Slice(0, 32*512))
	var se *nvme.StatusError
	if !errors.As(err, &se) || !errors.Is(err, nvme.ErrMedia) {
		t.Fatalf("read over bad sector %d: %v, want a media error", g.BadReadSector, err)
	}
	t.Logf("read over bad sector: %v (sct %d sc %#x dnr %v)", err, se.Status.SCT(), se.Status.SC(), se.Status.DNR())
	// No wrong bytes: every word is either untouched or the right data.
	want := make([]byte, 32*512)
	testbed.Pattern(testbed.TagNVMe1n1, int64(lba)*512, want)
	for i := 0; i < len(want); i += 8 {
		got := buf.Bytes[i : i+8]
		if !bytes.Equal(got, want[i:i+8]) && !bytes.Equal(got, bytes.Repeat([]byte{sentinel}, 8)) {
			t.Fatalf("word at %d is neither data nor untouched: %x", i, got)
		}
	}
	// A read next to the bad sector is fine.
	if err := r.c.ReadBlocks(ctx, 1, lba-64, buf.Slice(0, 32*512)); err != nil {
		t.Fatalf("read beside the bad sector: %v", err)
	}
	checkPattern(t, testbed.TagNVMe1n1, int64(lba-64)*512, buf.Bytes[:32*512])
	err = r.c.WriteBlocks(ctx, 1, uint64(g.BadWriteSector-1), buf.Slice(0, 4096))
	if !errors.As(err, &se) || !errors.Is(err, nvme.ErrMedia) {
		t.Fatalf("write over bad sector %d: %v, want a media error", g.BadWriteSector, err)
	}
	t.Logf("write over bad sector: %v", err)
}

// TestTestbedResetMidRun resets the controller while four goroutines keep
// reads in flight: every read completes with the right bytes.
func TestTestbedResetMidRun(t *testing.T) {
	g := testbed.Require(t)
	for _, msix := range []bool{false, true} {
		t.Run(fmt.Sprintf("msix=%v", msix), func(t *testing.T) {
			r := openRig(t, g.NVMe0, nvme.Config{IOQueues: 2, QueueDepth: 16}, msix)
			ctx := context.Background()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			reads := 0
			for gi := 0; gi < 4; gi++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf, err := r.bus.Alloc(8 * 8192)
					if err != nil {
						t.Error(err)
						return
					}
					defer r.bus.Free(buf)
					q := r.c.Queues()[gi%2]
					for k := 0; ; k++ {
						select {
						case <-stop:
							return
						default:
						}
						var ts []*nvme.Ticket
						var lbas []uint64
						for i := 0; i < 8; i++ {
							lba := uint64((gi*1000+k*8+i)*16) % (40 << 11)
							tk, err := q.Read(ctx, 1, lba, buf.Slice(i*8192, 8192))
							if err != nil {
								t.Error(err)
								return
							}
							ts, lbas = append(ts, tk), append(lbas, lba)
						}
						for i, tk := range ts {
							if err := tk.Wait(); err != nil {
								t.Errorf("read lba %d: %v", lbas[i], err)
								return
							}
							checkPattern(t, testbed.TagNVMe0n1, int64(lbas[i])*512, buf.Bytes[i*8192:(i+1)*8192])
						}
						mu.Lock()
						reads += 8
						mu.Unlock()
					}
				}()
			}
			time.Sleep(300 * time.Millisecond)
			if err := r.c.Reset(ctx, "test: reset mid-run"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()
			st := r.c.Stats()
			t.Logf("reads %d, resets %d, resubmitted %d", reads, st.Resets, st.Resubmitted)
			if st.Resets != 1 || reads == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// rusage returns the process's user+system CPU time.
func rusage() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// busyTicks returns the guest's non-idle CPU ticks over all CPUs
// (/proc/stat), which also counts interrupt and kernel-thread work.
func busyTicks() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var total int64
	for i, v := range f[1:] {
		var n int64
		fmt.Sscan(v, &n)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		total += n
	}
	return total
}

type benchResult struct {
	mbps      float64
	cpuPerGiB time.Duration
	sysPerGiB time.Duration
}

func (b benchResult) String() string {
	return fmt.Sprintf("%.1f MB/s, process CPU %v/GiB, guest CPU %v/GiB", b.mbps, b.cpuPerGiB.Round(time.Millisecond), b.sysPerGiB.Round(time.Millisecond))
}

func measure(total int64, run func() error) (benchResult, error) {
	c0, s0, t0 := rusage(), busyTicks(), time.Now()
	if err := run(); err != nil {
		return benchResult{}, err
	}
	el := time.Since(t0)
	gib := float64(total) / (1 << 30)
	ticks := busyTicks() - s0
	return benchResult{
		mbps:      float64(total) / el.Seconds() / 1e6,
		cpuPerGiB: time.Duration(float64(rusage()-c0) / gib),
		sysPerGiB: time.Duration(float64(ticks) * 1e7 / gib), // USER_HZ = 100
	}, nil
}

// TestTestbedVersusKernel reads the same 32 MiB of nvme0n1 with the same
// block size and queue depth through this driver (polled and MSI-X) and
// through the kernel's nvme driver (O_DIRECT preads from QD goroutines),
// and logs throughput and CPU time per GiB. It rebinds nvme0 to nvme and
// back to vfio-pci, so it runs last.
func TestTestbedVersusKernel(t *testing.T) {
	g := testbed.Require(t)
	if _, err := os.Stat("/sys/bus/pci/drivers/nvme"); err != nil {
		t.Skip("kernel nvme driver not loaded in the guest")
	}
	const bs, qd, total, reps = 128 << 10, 8, 64 << 20, 3
	var results = map[string][]benchResult{}
	for _, msix := range []bool{false, true} {
		r := openRig(t, g.NVMe0, nvme.Config{IOQueues: 1, QueueDepth: qd + 1}, msix)
		q := r.c.Queues()[0]
		buf, err := r.bus.Alloc(qd * bs)
		if err != nil {
			t.Fatal(err)
		}
		name := "strata-polled"
		if msix {
			name = "strata-msix"
		}
		for rep := 0; rep < reps; rep++ {
			res, err := measure(total, func() error {
				var wg sync.WaitGroup
				errs := make(chan error, qd)
				for w := 0; w < qd; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for off := int64(w * bs); off < total; off += qd * bs {
							tk, err := q.Read(context.Background(), 1, uint64(off/512), buf.Slice(w*bs, bs))
							if err == nil {
								err = tk.Wait()
							}
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				return <-errs
			})
			if err != nil {
				t.Fatal(err)
			}
			checkPattern(t, testbed.TagNVMe0n1, int64(total-qd*bs), buf.Bytes)
			results[name] = append(results[name], res)
		}
		r.bus.Free(buf)
		r.close(t)
	}

	sys := vfio.Sysfs{}
	if _, err := sys.Bind(g.NVMe0, "nvme"); err != nil {
		t.Fatalf("binding %s to nvme: %v", g.NVMe0, err)
	}
	defer func() {
		if _, err := sys.Bind(g.NVMe0, "vfio-pci"); err != nil {
			t.Errorf("rebinding %s to vfio-pci: %v", g.NVMe0, err)
		}
	}()
	dev, err := waitBlockDev(g.NVMe0, 1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	df, err := hostmem.OpenDirect(dev)
	if err != nil {
		t.Fatalf("open %s O_DIRECT: %v", dev, err)
	}
	defer df.Close()
	kmem, err := hostmem.Alloc(qd*bs, hostmem.AllocOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer kmem.Free()
	kbuf := kmem.Bytes()
	for rep := 0; rep < reps; rep++ {
		res, err := measure(total, func() error {
			var wg sync.WaitGroup
			errs := make(chan error, qd)
			for w := 0; w < qd; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for off := int64(w * bs); off < total; off += qd * bs {
						if n, err := df.ReadAt(kbuf[w*bs:(w+1)*bs], off); err != nil || n != bs {
							errs <- fmt.Errorf("pread %s at %d: %d, %v", dev, off, n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			return <-errs
		})
		if err != nil {
			t.Fatal(err)
		}
		checkPattern(t, testbed.TagNVMe0n1, int64(total-qd*bs), kbuf)
		results["kernel-odirect"] = append(results["kernel-odirect"], res)
	}
	k := median(results["kernel-odirect"])
	for _, name := range []string{"strata-polled", "strata-msix", "kernel-odirect"} {
		rs := results[name]
		r := median(rs)
		var all []string
		for _, x := range rs {
			all = append(all, fmt.Sprintf("%.0f", x.mbps))
		}
		t.Logf("BENCH %-15s bs=%dKiB qd=%d %dMiB x%d: median %v (MB/s of each run: %s); throughput ratio vs kernel %.2f",
			name, bs>>10, qd, total>>20, reps, r, strings.Join(all, " "), r.mbps/k.mbps)
	}
}

// median returns the run with the median throughput.
func median(rs []benchResult) benchResult {
	s := append([]benchResult(nil), rs...)
	sort.Slice(s, func(i, j int) bool { return s[i].mbps < s[j].mbps })
	return s[len(s)/2]
}

// waitBlockDev finds the kernel's block device for namespace nsid once
// the nvme driver has probed the controller. Disk names do not follow
// namespace IDs (with multipath they are numbered in scan order), so the
// namespace is matched by /sys/block/*/nsid; the controller at bdf is the
// only one bound to the kernel driver in the guest.
func waitBlockDev(bdf string, nsid int, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		disks, _ := filepath.Glob("/sys/block/nvme*")
		for _, d := range disks {
			b, err := os.ReadFile(filepath.Join(d, "nsid"))
			if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(nsid) {
				continue
			}
			if _, err := os.Stat("/dev/" + filepath.Base(d)); err == nil {
				return "/dev/" + filepath.Base(d), nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no block device for %s namespace %d after %v", bdf, nsid, limit)
}
