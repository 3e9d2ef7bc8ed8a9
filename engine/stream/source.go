package stream

import (
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
