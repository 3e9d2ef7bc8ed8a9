package cudadrv

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// testPTX is nvcc 11.8's output for
//
//	extern "C" __global__ void axpb(float* x, int n, float a, float b) {
//	  int i = blockIdx.x * blockDim.x + threadIdx.x;
//	  if (i < n) x[i] = a * x[i] + b;
//	}
const testPTX = `.version 7.8
.target sm_61
.address_size 64
.visible .entry axpb(
	.param .u64 axpb_param_0,
	.param .u32 axpb_param_1,
	.param .f32 axpb_param_2,
	.param .f32 axpb_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<5>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [axpb_param_0];
	ld.param.u32 	%r2, [axpb_param_1];
	ld.param.f32 	%f1, [axpb_param_2];
	ld.param.f32 	%f2, [axpb_param_3];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f3, [%rd4];
	fma.rn.f32 	%f4, %f3, %f1, %f2;
	st.global.f32 	[%rd4], %f4;
$L__BB0_2:
	ret;
}
`

var (
	devOnce sync.Once
	dev     *Device
	devErr  error
)

// testDevice opens GPU 0 once for the package's tests, or skips the test
// with the reason CUDA cannot be used here.
func testDevice(t testing.TB) *Device {
	t.Helper()
	devOnce.Do(func() { dev, devErr = Open(0) })
	if devErr != nil {
		if errors.Is(devErr, ErrUnavailable) {
			t.Skipf("skipping GPU test: %v", devErr)
		}
		t.Fatalf("open device: %v", devErr)
	}
	return dev
}

func TestUnavailableMessage(t *testing.T) {
	t.Parallel()
	_, err := openLibrary([]string{"/nonexistent/libcuda.so.1"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: got %v, want ErrUnavailable", err)
	}
	if !strings.HasPrefix(err.Error(), "CUDA unavailable: ") {
		t.Fatalf("message %q lacks the CUDA unavailable prefix", err)
	}
}

// TestNoDriverNoCrash runs everywhere: on a host without libcuda every entry
// point must return ErrUnavailable; with a driver, it must work.
func TestNoDriverNoCrash(t *testing.T) {
	t.Parallel()
	err := Load()
	if err != nil {
		if !errors.Is(err, ErrUnavailable) || !strings.HasPrefix(err.Error(), "CUDA unavailable: ") {
			t.Fatalf("Load: %v, want a CUDA unavailable error", err)
		}
		if _, err := Open(0); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open without driver: %v", err)
		}
		if _, err := DeviceCount(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("DeviceCount without driver: %v", err)
		}
		if _, err := DriverVersion(); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("DriverVersion without driver: %v", err)
		}
		t.Logf("no driver here, as expected off the GPU machine: %v", err)
		return
	}
	v, err := DriverVersion()
	if err != nil || v < 11000 {
		t.Fatalf("DriverVersion = %d, %v", v, err)
	}
	if _, err := Open(1 << 20); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open(huge ordinal) = %v, want ErrUnavailable", err)
	}
}

func TestDeviceAttributes(t *testing.T) {
	d := testDevice(t)
	maj, min := d.ComputeCapability()
	if maj < 6 || d.Name() == "" || d.TotalMem() < 1<<30 {
		t.Fatalf("device %q cc %d.%d mem %d: implausible", d.Name(), maj, min, d.TotalMem())
	}
	sms, err := d.Attribute(AttrMultiprocessorCount)
	if err != nil || sms < 1 {
		t.Fatalf("SM count %d, %v", sms, err)
	}
	ws, _ := d.Attribute(AttrWarpSize)
	if ws != 32 {
		t.Fatalf("warp size %d", ws)
	}
	dmabuf, _ := d.Attribute(AttrDmaBufSupported)
	rdma, _ := d.Attribute(AttrGPUDirectRDMASupported)
	l2, _ := d.Attribute(AttrL2CacheSize)
	var free, total int64
	if err := d.Do(func(c *Ctx) error { var err error; free, total, err = c.MemInfo(); return err }); err != nil {
		t.Fatal(err)
	}
	if free <= 0 || total < free {
		t.Fatalf("meminfo free %d total %d", free, total)
	}
	t.Logf("%s cc %d.%d, %d SMs, L2 %d KiB, %d MiB (%d MiB free), dma-buf %d, GPUDirect RDMA %d",
		d.Name(), maj, min, sms, l2>>10, total>>20, free>>20, dmabuf, rdma)
}

func TestErrorsCarryNames(t *testing.T) {
	d := testDevice(t)
	err := d.Do(func(c *Ctx) error { _, err := c.Alloc(1 << 62); return err })
	if !IsCode(err, ResultOutOfMemory) {
		t.Fatalf("huge alloc: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("error %q lacks the CUresult name", err)
	}
	if !errors.Is(err, &Error{Code: ResultOutOfMemory}) {
		t.Fatalf("errors.Is by code failed for %v", err)
	}
	err = d.Do(func(c *Ctx) error { _, err := c.Function(0, "nope"); return err })
	var ce *Error
	if !errors.As(err, &ce) || ce.Name == "" {
		t.Fatalf("bad handle: %v", err)
	}
	if err := d.Do(func(c *Ctx) error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic not turned into an error: %v", err)
	}
}

func TestCopiesAndPinned(t *testing.T) {
	d := testDevice(t)
	const n = 1 << 20
	err := d.Do(func(c *Ctx) error {
		s, err := c.NewStream(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		a, err := c.Alloc(n * 4)
		if err != nil {
			return err
		}
		defer c.Free(a)
		b, err := c.Alloc(n * 4)
		if err != nil {
			return err
		}
		defer c.Free(b)
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i) * 0.5
		}
		// Pinned allocation round trip.
		h, err := c.HostAlloc(n*4, HostAllocPortable)
		if err != nil {
			return err
		}
		defer c.FreeHost(h)
		hv, err := Values[float32](h.Bytes())
		if err != nil {
			return err
		}
		copy(hv, src)
		if err := c.CopyHtoD(a, h.Bytes(), s); err != nil {
			return err
		}
		if err := c.CopyDtoD(b, a, n*4, s); err != nil {
			return err
		}
		// Registered mmap round trip.
		m, err := syscall.Mmap(-1, 0, n*4, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return err
		}
		defer syscall.Munmap(m)
		r, err := c.HostRegister(m, HostRegisterPortable)
		if err != nil {
			return err
		}
		defer c.HostUnregister(r)
		if err := c.CopyDtoH(r.Bytes(), b, s); err != nil {
			return err
		}
		if err := c.StreamSync(s); err != nil {
			return err
		}
		got, _ := Values[float32](m)
		for i := range src {
			if got[i] != src[i] {
				t.Errorf("element %d: %v, want %v", i, got[i], src[i])
				break
			}
		}
		// Memset and a pageable download.
		if err := c.MemsetD32(a, math.Float32bits(3), n, s); err != nil {
			return err
		}
		out := make([]float32, 4)
		if err := Download(c, out, a.Add(4*(n-4)), s); err != nil {
			return err
		}
		for _, v := range out {
			if v != 3 {
				t.Errorf("memset: %v", out)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLaunchEventsAndGraph(t *testing.T) {
	d := testDevice(t)
	const n = 4096
	err := d.Do(func(c *Ctx) error {
		return withKernel(c, testPTX, "axpb", n, func(f Function, s Stream, x DevPtr) error {
			host := make([]float32, n)
			for i := range host {
				host[i] = float32(i)
			}
			if err := Upload(c, x, host, s); err != nil {
				return err
			}
			cfg := LaunchConfig{Grid: Dim3{X: n / 256}, Block: Dim3{X: 256}}
			var a Args
			a.Ptr(x).Int(n).F32(2).F32(1)
			if err := c.Launch(f, cfg, s, &a); err != nil {
				return err
			}
			// Capture 3 more launches (x = x+1 each), replay the graph twice.
			a.Reset().Ptr(x).Int(n).F32(1).F32(1)
			g, ge, release, err := captureLaunches(c, s, f, cfg, &a, 3)
			if err != nil {
				return err
			}
			defer release()
			if nodes, err := c.GraphNodes(g); err != nil || nodes != 3 {
				t.Errorf("graph has %d nodes (%v), want 3", nodes, err)
			}
			e0, _ := c.NewEvent(EventDefault)
			e1, _ := c.NewEvent(EventDefault)
			defer c.DestroyEvent(e0)
			defer c.DestroyEvent(e1)
			c.Record(e0, s)
			for i := 0; i < 2; i++ {
				if err := c.GraphLaunch(ge, s); err != nil {
					return err
				}
			}
			c.Record(e1, s)
			if err := c.EventSync(e1); err != nil {
				return err
			}
			ms, err := c.Elapsed(e0, e1)
			if err != nil || ms < 0 {
				t.Errorf("elapsed %v ms, %v", ms, err)
			}
			out := make([]float32, n)
			if err := Download(c, out, x, s); err != nil {
				return err
			}
			for i, v := range out {
				if want := 2*float32(i) + 1 + 6; v != want {
					t.Errorf("x[%d] = %v, want %v", i, v, want)
					break
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentCallers checks that many goroutines can share one Device:
// every call lands on its locked thread, in some order, without races.
func TestConcurrentCallers(t *testing.T) {
	d := testDevice(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				err := d.Do(func(c *Ctx) error {
					p, err := c.Alloc(4096)
					if err != nil {
						return err
					}
					return c.Free(p)
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestDmaBufExport(t *testing.T) {
	d := testDevice(t)
	if ok, _ := d.Attribute(AttrDmaBufSupported); ok != 1 {
		t.Skip("skipping: device reports no dma-buf support")
	}
	const n = 2 << 20
	err := d.Do(func(c *Ctx) error {
		p, err := c.Alloc(n)
		if err != nil {
			return err
		}
		defer c.Free(p)
		fd, err := c.ExportDmaBuf(p, n)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return err
		}
		t.Logf("dma-buf fd %d, size %d", fd, st.Size)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCopy measures device-to-device, pinned H2D and pinned D2H
// bandwidth with 256 MiB copies timed by events.
func BenchmarkCopy(b *testing.B) {
	d := testDevice(b)
	const n = 256 << 20
	for _, kind := range []string{"DtoD", "HtoD", "DtoH"} {
		b.Run(kind, func(b *testing.B) {
			err := d.Do(func(c *Ctx) error {
				s, _ := c.NewStream(StreamNonBlocking)
				defer c.DestroyStream(s)
				a, err := c.Alloc(n)
				if err != nil {
					return err
				}
				defer c.Free(a)
				bb, err := c.Alloc(n)
				if err != nil {
					return err
				}
				defer c.Free(bb)
				h, err := c.HostAlloc(n, HostAllocPortable)
				if err != nil {
					return err
				}
				defer c.FreeHost(h)
				one := func() error {
					switch kind {
					case "DtoD":
						return c.CopyDtoD(bb, a, n, s)
					case "HtoD":
						return c.CopyHtoD(a, h.Bytes(), s)
					default:
						return c.CopyDtoH(h.Bytes(), a, s)
					}
				}
				one()
				c.StreamSync(s)
				e0, _ := c.NewEvent(0)
				e1, _ := c.NewEvent(0)
				b.ResetTimer()
				c.Record(e0, s)
				for i := 0; i < b.N; i++ {
					if err := one(); err != nil {
						return err
					}
				}
				c.Record(e1, s)
				c.EventSync(e1)
				ms, _ := c.Elapsed(e0, e1)
				bytes := float64(n) * float64(b.N)
				if kind == "DtoD" {
					bytes *= 2 // read + write
				}
				b.ReportMetric(bytes/(float64(ms)/1e3)/1e9, "GB/s")
				b.SetBytes(n)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
	_ = time.Second
}

// TestLaunchExLayout pins launchConfig and launchAttr to cuda.h's
// CUlaunchConfig and CUlaunchAttribute on 64-bit hosts: the driver reads
// them by offset, so a field out of place would launch a wrong grid.
func TestLaunchExLayout(t *testing.T) {
	t.Parallel()
	var c launchConfig
	var a launchAttr
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof CUlaunchConfig", unsafe.Sizeof(c), 56},
		{"offsetof blockDimX", unsafe.Offsetof(c.block), 12},
		{"offsetof sharedMemBytes", unsafe.Offsetof(c.sharedMem), 24},
		{"offsetof hStream", unsafe.Offsetof(c.stream), 32},
		{"offsetof attrs", unsafe.Offsetof(c.attrs), 40},
		{"offsetof numAttrs", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof CUlaunchAttribute", unsafe.Sizeof(a), 72},
		{"offsetof value", unsafe.Offsetof(a.val), 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// chainPTX is nvcc 11.8's output (compute_90) for
//
//	extern "C" __global__ void chain(float* x, int n) {
//	  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
//	  asm volatile("griddepcontrol.wait;" ::: "memory");
//	  int i = blockIdx.x * blockDim.x + threadIdx.x;
//	  if (i < n) x[i] = 2.0f * x[i] + 1.0f;
//	}
const chainPTX = `.version 7.8
.target sm_90
.address_size 64
.visible .entry chain(
	.param .u64 chain_param_0,
	.param .u32 chain_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<3>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [chain_param_0];
	ld.param.u32 	%r2, [chain_param_1];
	griddepcontrol.launch_dependents;
	griddepcontrol.wait;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %ctaid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r4, %r3, %r5;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.s32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f1, [%rd4];
	fma.rn.f32 	%f2, %f1, 0f40000000, 0f3F800000;
	st.global.f32 	[%rd4], %f2;
$L__BB0_2:
	ret;
}
`

// TestOverlapLaunch runs chains of dependent kernels launched with
// LaunchConfig.Overlap (each triggers its dependents at once, then waits
// for its predecessor before reading x), directly and from a captured
// graph: every element must see every step in order, as without Overlap.
func TestOverlapLaunch(t *testing.T) {
	d := testDevice(t)
	if maj, _ := d.ComputeCapability(); maj < 9 || !CanOverlap() {
		t.Skipf("programmatic dependent launch needs compute capability 9.0 and cuLaunchKernelEx (device %d.x, driver entry %v)", maj, CanOverlap())
	}
	const n, steps = 1 << 22, 24
	err := d.Do(func(c *Ctx) error {
		return withKernel(c, chainPTX, "chain", n, func(f Function, s Stream, x DevPtr) error {
			host := make([]float32, n)
			for i := range host {
				host[i] = float32(i % 1000)
			}
			cfg := LaunchConfig{Grid: Dim3{X: n / 256}, Block: Dim3{X: 256}, Overlap: true}
			var a Args
			a.Ptr(x).Int(n)
			check := func(what string, applied int) error {
				out := make([]float32, n)
				if err := Download(c, out, x, s); err != nil {
					return err
				}
				for i, v := range out {
					want := float32(i % 1000)
					for range applied {
						want = float32(2*float64(want) + 1)
					}
					if v != want {
						t.Errorf("%s: x[%d] = %v, want %v (%d steps)", what, i, v, want, applied)
						break
					}
				}
				return nil
			}
			if err := Upload(c, x, host, s); err != nil {
				return err
			}
			for range steps {
				if err := c.Launch(f, cfg, s, &a); err != nil {
					return err
				}
			}
			if err := check("direct", steps); err != nil {
				return err
			}
			if err := Upload(c, x, host, s); err != nil {
				return err
			}
			_, ge, release, err := captureLaunches(c, s, f, cfg, &a, steps)
			if err != nil {
				return err
			}
			defer release()
			for range 2 {
				if err := c.GraphLaunch(ge, s); err != nil {
					return err
				}
			}
			return check("graph", 2*steps)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// withKernel loads ptx, resolves kernel name and gives fn a fresh stream
// and a device buffer of n float32s, all released when fn returns.
func withKernel(c *Ctx, ptx, name string, n int, fn func(f Function, s Stream, x DevPtr) error) error {
	m, err := c.LoadModule([]byte(ptx))
	if err != nil {
		return err
	}
	defer c.UnloadModule(m)
	f, err := c.Function(m, name)
	if err != nil {
		return err
	}
	s, err := c.NewStream(StreamNonBlocking)
	if err != nil {
		return err
	}
	defer c.DestroyStream(s)
	x, err := c.Alloc(int64(n) * 4)
	if err != nil {
		return err
	}
	defer c.Free(x)
	return fn(f, s, x)
}

// captureLaunches records count launches of f on s into a graph and
// instantiates it; release destroys both.
func captureLaunches(c *Ctx, s Stream, f Function, cfg LaunchConfig, a *Args, count int) (Graph, GraphExec, func(), error) {
	if err := c.BeginCapture(s, CaptureThreadLocal); err != nil {
		return 0, 0, nil, err
	}
	for range count {
		if err := c.Launch(f, cfg, s, a); err != nil {
			c.EndCapture(s)
			return 0, 0, nil, err
		}
	}
	g, err := c.EndCapture(s)
	if err != nil {
		return 0, 0, nil, err
	}
	ge, err := c.Instantiate(g)
	if err != nil {
		c.DestroyGraph(g)
		return 0, 0, nil, err
	}
	return g, ge, func() { c.DestroyGraphExec(ge); c.DestroyGraph(g) }, nil
}

// TestCaptureAndTimeEvents checks Capture (the graph holds what fn
// enqueued, an fn that fails leaves the stream usable and no graph) and
// TimeEvents (fn runs once to warm up and then iters times, all on the
// device, and the time per iteration is positive).
func TestCaptureAndTimeEvents(t *testing.T) {
	d := testDevice(t)
	const n = 4096
	err := d.Do(func(c *Ctx) error {
		return withKernel(c, testPTX, "axpb", n, func(f Function, s Stream, x DevPtr) error {
			if err := Upload(c, x, make([]float32, n), s); err != nil {
				return err
			}
			cfg := LaunchConfig{Grid: Dim3{X: n / 256}, Block: Dim3{X: 256}}
			var a Args
			a.Ptr(x).Int(n).F32(1).F32(1) // x = x + 1
			inc := func() error { return c.Launch(f, cfg, s, &a) }
			ge, nodes, err := c.Capture(s, CaptureThreadLocal, func() error {
				for range 3 {
					if err := inc(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			defer c.DestroyGraphExec(ge)
			if nodes != 3 {
				t.Errorf("graph has %d nodes, want 3", nodes)
			}
			boom := errors.New("boom")
			if _, _, err := c.Capture(s, CaptureThreadLocal, func() error { _ = inc(); return boom }); !errors.Is(err, boom) {
				t.Errorf("failed capture: %v, want %v", err, boom)
			}
			if err := c.GraphLaunch(ge, s); err != nil { // +3
				return err
			}
			if _, err := c.TimeEvents(s, 0, inc); err == nil {
				t.Error("TimeEvents with 0 iterations: no error")
			}
			per, err := c.TimeEvents(s, 4, inc) // +1 warm-up, +4
			if err != nil {
				return err
			}
			if per <= 0 {
				t.Errorf("time per iteration %v, want > 0", per)
			}
			out := make([]float32, n)
			if err := Download(c, out, x, s); err != nil {
				return err
			}
			for i, v := range out {
				if v != 8 {
					t.Errorf("x[%d] = %v, want 8 (3 replayed, 1 warm-up, 4 timed)", i, v)
					break
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopyHtoD2D: some columns of a wider pinned host matrix land packed
// on the device in one 2D copy, byte for byte; shapes the copy cannot
// take are refused before the driver is asked.
func TestCopyHtoD2D(t *testing.T) {
	d := testDevice(t)
	const rows, pitch, from, width = 37, 100, 16, 40
	err := d.Do(func(c *Ctx) error {
		h, err := c.HostAlloc(rows*pitch, 0)
		if err != nil {
			return err
		}
		defer c.FreeHost(h)
		src := h.Bytes()
		for i := range src {
			src[i] = byte(i*7 + i/pitch)
		}
		dst, err := c.Alloc(rows * width)
		if err != nil {
			return err
		}
		defer c.Free(dst)
		view := src[from : (rows-1)*pitch+from+width]
		if err := c.CopyHtoD2D(dst, width, view, pitch, width, rows, 0); err != nil {
			return err
		}
		got := make([]byte, rows*width)
		if err := c.CopyDtoH(got, dst, 0); err != nil {
			return err
		}
		if err := c.StreamSync(0); err != nil {
			return err
		}
		for r := range rows {
			if want := src[r*pitch+from : r*pitch+from+width]; !bytes.Equal(got[r*width:(r+1)*width], want) {
				t.Fatalf("row %d: %v, want %v", r, got[r*width:(r+1)*width], want)
			}
		}
		for _, bad := range []struct {
			name                        string
			src                         []byte
			srcPitch, width, height, dp int64
		}{
			{"rows wider than the source's pitch", view, 30, width, rows, width},
			{"rows wider than the destination's pitch", view, pitch, width, rows, width - 1},
			{"one byte short", view[:len(view)-1], pitch, width, rows, width},
			{"no rows", view, pitch, width, 0, width},
		} {
			if err := c.CopyHtoD2D(dst, bad.dp, bad.src, bad.srcPitch, bad.width, bad.height, 0); err == nil {
				t.Errorf("%s accepted", bad.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
