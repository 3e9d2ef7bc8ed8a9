package vfio

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestMMIOSplitsAccesses(t *testing.T) {
	t.Parallel()
	mem, err := AllocDMA(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeDMA(mem)
	m, err := NewMMIO(mem)
	if err != nil {
		t.Fatal(err)
	}
	m.Write64(0x28, 0x1122334455667788) // ASQ-like 64-bit register
	if got := ne.Uint32(mem[0x28:]); got != 0x55667788 {
		t.Fatalf("low word %#x", got)
	}
	if got := ne.Uint32(mem[0x2c:]); got != 0x11223344 {
		t.Fatalf("high word %#x", got)
	}
	if got := m.Read64(0x28); got != 0x1122334455667788 {
		t.Fatalf("Read64 %#x", got)
	}
	m.Write32(0xffc, 0xdeadbeef)
	if m.Read32(0xffc) != 0xdeadbeef {
		t.Fatal("Read32 of the last register")
	}
	for _, off := range []uintptr{0x1000, 0x2, 0xffe, ^uintptr(0)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("access at %#x did not panic", off)
				}
			}()
			m.Read32(off)
		}()
	}
}

func TestEventFD(t *testing.T) {
	t.Parallel()
	e, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n, err := e.Poll(); err != nil || n != 0 {
		t.Fatalf("Poll on a fresh eventfd = %d, %v", n, err)
	}
	if _, err := e.Wait(20 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait with nothing signalled: %v", err)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		e.Signal(2)
		e.Signal(1)
	}()
	var total uint64
	for total < 3 {
		n, err := e.Wait(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 3 {
		t.Fatalf("count %d, want 3", total)
	}
}
