package cudadrv

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestSignal: a stream held by WaitValue32 on a mapped host word runs
// nothing until the host stores the word, then runs its work and tells
// the host through WriteValue32 on another mapped word, which the host
// polls. The counter starts two below 2^32, so the second round's wait
// crosses the wrap (the comparison is cyclic).
func TestSignal(t *testing.T) {
	d := testDevice(t)
	if !CanSignal() {
		t.Skip("the driver lacks cuStreamWaitValue32_v2")
	}
	const n = 1024
	err := d.Do(func(c *Ctx) error {
		s, err := c.NewStream(StreamNonBlocking)
		if err != nil {
			return err
		}
		defer c.DestroyStream(s)
		buf, err := c.Alloc(n * 4)
		if err != nil {
			return err
		}
		defer c.Free(buf)
		hm, err := c.HostAlloc(64, HostAllocDeviceMap)
		if err != nil {
			return err
		}
		defer c.FreeHost(hm)
		hp, err := c.HostDevicePointer(hm)
		if err != nil {
			return err
		}
		words, err := Values[uint32](hm.Bytes())
		if err != nil {
			return err
		}
		start := ^uint32(0) - 1
		goWord, doneWord := &words[0], &words[1]
		atomic.StoreUint32(goWord, start)
		atomic.StoreUint32(doneWord, start)
		for round := uint32(1); round <= 2; round++ {
			want := start + round
			if err := c.WaitValue32(s, hp, want); err != nil {
				return err
			}
			if err := c.MemsetD32(buf, 100+round, n, s); err != nil {
				return err
			}
			if err := c.WriteValue32(s, hp.Add(4), want); err != nil {
				return err
			}
			// Held: neither the memset nor the write may run yet.
			time.Sleep(20 * time.Millisecond)
			if done, err := c.StreamDone(s); err != nil {
				return err
			} else if done {
				return fmt.Errorf("round %d: the stream finished before the host stored its word", round)
			}
			if got := atomic.LoadUint32(doneWord); got != want-1 {
				return fmt.Errorf("round %d: the device wrote %#x before its wait was met", round, got)
			}
			atomic.StoreUint32(goWord, want)
			deadline := time.Now().Add(5 * time.Second)
			for atomic.LoadUint32(doneWord) != want {
				if time.Now().After(deadline) {
					return fmt.Errorf("round %d: no signal from the device within 5 s (word %#x)", round, atomic.LoadUint32(doneWord))
				}
			}
			out := make([]uint32, n)
			if err := Download(c, out, buf, s); err != nil {
				return err
			}
			for i, v := range out {
				if v != 100+round {
					return fmt.Errorf("round %d: word %d is %d after the signal, want %d", round, i, v, 100+round)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
