package cudadrv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ErrClosed is returned by calls on a Device after Close.
var ErrClosed = errors.New("cuda: device closed")

// Attribute is a CUdevice_attribute (cuda.h).
type Attribute int32

// Device attributes strata reads.
const (
	AttrMaxThreadsPerBlock           Attribute = 1
	AttrMaxSharedMemoryPerBlock      Attribute = 8
	AttrWarpSize                     Attribute = 10
	AttrClockRate                    Attribute = 13
	AttrMultiprocessorCount          Attribute = 16
	AttrCanMapHostMemory             Attribute = 19
	AttrPCIBusID                     Attribute = 33
	AttrPCIDeviceID                  Attribute = 34
	AttrMemoryClockRate              Attribute = 36
	AttrGlobalMemoryBusWidth         Attribute = 37
	AttrL2CacheSize                  Attribute = 38
	AttrMaxThreadsPerMultiprocessor  Attribute = 39
	AttrAsyncEngineCount             Attribute = 40
	AttrUnifiedAddressing            Attribute = 41
	AttrPCIDomainID                  Attribute = 50
	AttrComputeCapabilityMajor       Attribute = 75
	AttrComputeCapabilityMinor       Attribute = 76
	AttrMaxSharedMemoryPerSM         Attribute = 81
	AttrMaxSharedMemoryPerBlockOptin Attribute = 97
	AttrGPUDirectRDMASupported       Attribute = 116
	AttrDmaBufSupported              Attribute = 124
)

// Device is one GPU with its primary context, served by a goroutine locked
// to one OS thread. Methods are safe for concurrent use; they queue work on
// that goroutine and wait for it.
type Device struct {
	ordinal  int
	dev      int32
	name     string
	major    int
	minor    int
	totalMem int64

	mu     sync.RWMutex
	closed bool
	spin   atomic.Int64 // SetSpin's duration, ns
	work   chan job
	exited chan struct{}
	ctx    *Ctx
	// bind makes the context current on the calling thread (a device
	// goroutine that takes over from one a call ended), release gives it
	// back once the last one stops; both are the driver's, or tests'
	// stand-ins.
	bind, release func() error
}

// Open starts the device goroutine for GPU ordinal, retains the device's
// primary context and makes it current on that goroutine's thread. A
// missing driver, a driver without devices or an ordinal past the last
// device yields an error wrapping ErrUnavailable.
func Open(ordinal int) (*Device, error) {
	n, err := DeviceCount()
	if err != nil {
		if IsCode(err, ResultNoDevice) {
			return nil, unavailable("no CUDA device")
		}
		return nil, err
	}
	if n == 0 {
		return nil, unavailable("no CUDA device")
	}
	if ordinal < 0 || ordinal >= n {
		return nil, unavailable("device %d requested, %d present", ordinal, n)
	}
	d := &Device{ordinal: ordinal, work: make(chan job), exited: make(chan struct{})}
	started := make(chan error, 1)
	go d.serve(started)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("open CUDA device %d: %w", ordinal, err)
	}
	return d, nil
}

// serve is the device goroutine: it owns the OS thread the primary context
// is current on.
func (d *Device) serve(started chan<- error) {
	runtime.LockOSThread()
	// The goroutine never unlocks: when it returns, the runtime retires the
	// thread together with its driver state.
	var ctx uintptr
	if err := d.attach(&ctx); err != nil {
		started <- err
		close(d.exited)
		return
	}
	d.ctx = newCtx(d, ctx)
	d.bind = func() error { return check("cuCtxSetCurrent", call(drv.cuCtxSetCurrent, ctx)) }
	d.release = func() error {
		call(drv.cuCtxSynchronize)
		return check("cuDevicePrimaryCtxRelease", call(drv.cuDevicePrimaryCtxRelease, uintptr(d.dev)))
	}
	started <- nil
	d.loop()
}

// job is one Do call: its function and where its error goes.
type job struct {
	fn  func(c *Ctx) error
	res chan error
}

// loop runs calls on the device goroutine until Close. A call that ends
// its goroutine (runtime.Goexit: a test's FailNow or SkipNow inside Do)
// takes the goroutine's thread with it: another goroutine, locked to a
// thread of its own with the context made current there, serves the
// calls after it, so the Device outlives the mistake and Do returns an
// error instead of waiting for good.
func (d *Device) loop() {
	stopped := false
	defer func() {
		if stopped {
			_ = d.release()
			close(d.exited)
			return
		}
		go d.takeOver()
	}()
	for {
		j, ok := d.receive()
		if !ok {
			break
		}
		d.run(j)
	}
	stopped = true
}

// run runs one call on the device goroutine: a panic becomes its error,
// and so does runtime.Goexit (which then ends the goroutine: loop hands
// over).
func (d *Device) run(j job) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			j.res <- fmt.Errorf("cuda: panic on device goroutine: %v", p)
			return
		}
		j.res <- errors.New("cuda: the call ended the device goroutine (runtime.Goexit: a test's FailNow or SkipNow inside Device.Do?)")
	}()
	err := j.fn(d.ctx)
	returned = true
	j.res <- err
}

// takeOver serves the device's calls on a new goroutine after a call
// ended the last one.
func (d *Device) takeOver() {
	runtime.LockOSThread()
	if err := d.bind(); err != nil {
		err = fmt.Errorf("cuda: no device goroutine could take over the context: %w", err)
		for j := range d.work {
			j.res <- err
		}
		close(d.exited)
		return
	}
	d.loop()
}

func (d *Device) attach(ctx *uintptr) error {
	var dev int32
	if err := check("cuDeviceGet", call(drv.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(d.ordinal))); err != nil {
		return err
	}
	d.dev = dev
	var name [256]byte
	if err := check("cuDeviceGetName", call(drv.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err != nil {
		return err
	}
	d.name = goString(unsafe.Pointer(&name[0]))
	var mem uint64
	if err := check("cuDeviceTotalMem", call(drv.cuDeviceTotalMem, uintptr(unsafe.Pointer(&mem)), uintptr(dev))); err != nil {
		return err
	}
	d.totalMem = int64(mem)
	var err error
	if d.major, err = attribute(dev, AttrComputeCapabilityMajor); err != nil {
		return err
	}
	if d.minor, err = attribute(dev, AttrComputeCapabilityMinor); err != nil {
		return err
	}
	var c uintptr
	if err := check("cuDevicePrimaryCtxRetain", call(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(dev))); err != nil {
		return err
	}
	if err := check("cuCtxSetCurrent", call(drv.cuCtxSetCurrent, c)); err != nil {
		call(drv.cuDevicePrimaryCtxRelease, uintptr(dev))
		return err
	}
	*ctx = c
	return nil
}

func attribute(dev int32, a Attribute) (int, error) {
	var v int32
	if err := check("cuDeviceGetAttribute", call(drv.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev))); err != nil {
		return 0, fmt.Errorf("attribute %d: %w", a, err)
	}
	return int(v), nil
}

// Ordinal is the device index Open was given.
func (d *Device) Ordinal() int { return d.ordinal }

// Name is the device's marketing name ("NVIDIA H200").
func (d *Device) Name() string { return d.name }

// ComputeCapability returns the SM version (9, 0 for Hopper); kernels use
// it to pick their PTX.
func (d *Device) ComputeCapability() (major, minor int) { return d.major, d.minor }

// TotalMem is the device memory in bytes.
func (d *Device) TotalMem() int64 { return d.totalMem }

// Attribute reads a device attribute.
func (d *Device) Attribute(a Attribute) (int, error) {
	var v int
	err := d.Do(func(*Ctx) error {
		var err error
		v, err = attribute(d.dev, a)
		return err
	})
	return v, err
}

// Do runs fn on the device goroutine with the device's context current and
// returns its error. fn must not call Do on the same Device (it would wait
// for itself) and must not keep c after returning. A panic in fn is
// returned as an error rather than killing the device goroutine; so is a
// runtime.Goexit (t.FailNow or t.SkipNow called in fn), after which
// another goroutine serves the device.
func (d *Device) Do(fn func(c *Ctx) error) error { return d.do(fn, true) }

// DoSleeping is Do with its caller asleep on the result at once, whatever
// SetSpin says (the device goroutine still polls for the next call). It
// is for a call that puts the host's cores to work itself (a pass whose
// CPU share runs on every core): a caller polling for the result would
// hold a core, and one of the Go runtime's processors, that the call's
// own threads need, and one of them would wait for it to yield.
func (d *Device) DoSleeping(fn func(c *Ctx) error) error { return d.do(fn, false) }

// do is Do, the caller polling for the result (within SetSpin's
// duration) when spin is set.
func (d *Device) do(fn func(c *Ctx) error, spin bool) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	res := make(chan error, 1)
	d.work <- job{fn: fn, res: res}
	if sp := time.Duration(d.spin.Load()); spin && sp > 0 {
		deadline := time.Now().Add(sp)
		for i := 0; ; i++ {
			select {
			case err := <-res:
				return err
			default:
			}
			if i%64 == 63 && time.Now().After(deadline) {
				break
			}
		}
	}
	return <-res
}

// SetSpin makes the hand-offs of Do spin for up to dur instead of
// sleeping at once: the device goroutine polls for the next call for dur
// after finishing one, and Do's caller polls for the result for up to dur.
// A sleeping goroutine is woken through the scheduler and the kernel
// (futex, and on a virtual machine an inter-processor interrupt), which
// adds microseconds to every Do; a latency-bound loop of short calls, such
// as decode steps of a few milliseconds, may trade a spinning core on each
// side for them. 0 (the default) never spins.
func (d *Device) SetSpin(dur time.Duration) { d.spin.Store(int64(max(dur, 0))) }

// receive takes the next call for the device goroutine, polling for up to
// SetSpin's duration before blocking.
func (d *Device) receive() (job, bool) {
	if sp := time.Duration(d.spin.Load()); sp > 0 {
		deadline := time.Now().Add(sp)
		for i := 0; ; i++ {
			select {
			case j, ok := <-d.work:
				return j, ok
			default:
			}
			if i%64 == 63 && time.Now().After(deadline) {
				break
			}
		}
	}
	j, ok := <-d.work
	return j, ok
}

// Close waits for queued work, synchronises the context, releases it and
// stops the device goroutine. Memory and objects not freed before are
// reclaimed by the driver when the last primary-context reference goes.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.work)
	d.mu.Unlock()
	<-d.exited
	return nil
}

// Ctx is the device's driver context as seen from its goroutine. It is
// only valid inside a Device.Do callback; its methods call the driver
// directly, without a hand-off.
type Ctx struct {
	d   *Device
	ctx uintptr

	// Launch argument storage: kernelParams points into argVals, both
	// heap-allocated once so the addresses handed to the driver are stable.
	argVals *[maxArgs]uint64
	argPtrs *[maxArgs]uintptr
	// cuLaunchKernelEx's config and its one attribute, heap-allocated
	// once for the same reason (the config holds the attribute's address).
	lcfg  *launchConfig
	lattr *launchAttr
}

func newCtx(d *Device, ctx uintptr) *Ctx {
	c := &Ctx{d: d, ctx: ctx, argVals: new([maxArgs]uint64), argPtrs: new([maxArgs]uintptr),
		lcfg: new(launchConfig), lattr: new(launchAttr)}
	for i := range c.argPtrs {
		c.argPtrs[i] = uintptr(unsafe.Pointer(&c.argVals[i]))
	}
	return c
}

// Device returns the Device the context belongs to.
func (c *Ctx) Device() *Device { return c.d }

// Synchronize waits for all work on the device.
func (c *Ctx) Synchronize() error {
	return check("cuCtxSynchronize", call(drv.cuCtxSynchronize))
}

// MemInfo reports free and total device memory in bytes.
func (c *Ctx) MemInfo() (free, total int64, err error) {
	var f, t uint64
	if err := check("cuMemGetInfo", call(drv.cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t)))); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// AttributeOnThread reads a device attribute from inside a Do callback
// (Attribute would wait for the callback itself).
func (d *Device) AttributeOnThread(c *Ctx, a Attribute) (int, error) {
	if c == nil || c.d != d {
		return 0, fmt.Errorf("cuda: AttributeOnThread needs the device's own Ctx")
	}
	return attribute(d.dev, a)
}
