package stream

import (
	"fmt"

	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/hostmem"
)

// AllocAligned returns n bytes (rounded up to PageSize) of page-aligned
// anonymous memory outside the Go heap, for staging buffers and slots.
func AllocAligned(n int) (*tier.Buffer, error) {
	r, err := hostmem.Alloc(n, hostmem.AllocOptions{})
	if err != nil {
		return nil, err
	}
	return tier.NewBuffer(r.Bytes(), func([]byte) error { return r.Free() }), nil
}

// checkAligned enforces a source's alignment rule for one ReadAt.
func checkAligned(dst []byte, off int64, align int) error {
	if align <= 1 {
		return nil
	}
	a := int64(align)
	if off%a != 0 || int64(len(dst))%a != 0 || (len(dst) > 0 && hostmem.Addr(dst)%uintptr(align) != 0) {
		return fmt.Errorf("read of %d bytes at %d into %#x: %w (need %d-byte alignment)", len(dst), off, hostmem.Addr(dst), tier.ErrMisaligned, align)
	}
	return nil
}
