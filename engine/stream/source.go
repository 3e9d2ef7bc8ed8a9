package stream

import (
	"fmt"

	"github.com/strata-llm/strata/engine/tier"
)

// AllocAligned returns n bytes (rounded up to PageSize) of page-aligned
// anonymous memory outside the Go heap, for staging buffers and slots.
func AllocAligned(n int) (*tier.Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc %d bytes: negative size", n)
	}
	size := roundUp(max(n, 1), tier.PageSize)
	b, err := mapAnon(size)
	if err != nil {
		return nil, fmt.Errorf("alloc %d bytes: %w", n, err)
	}
	return tier.NewBuffer(b[:n:n], func([]byte) error { return unmap(b) }), nil
}

// checkAligned enforces a source's alignment rule for one ReadAt.
func checkAligned(dst []byte, off int64, align int) error {
	if align <= 1 {
		return nil
	}
	a := int64(align)
	if off%a != 0 || int64(len(dst))%a != 0 || (len(dst) > 0 && addr(dst)%uintptr(align) != 0) {
		return fmt.Errorf("read of %d bytes at %d into %#x: %w (need %d-byte alignment)", len(dst), off, addr(dst), tier.ErrMisaligned, align)
	}
	return nil
}

func roundUp(n, a int) int { return (n + a - 1) / a * a }
