package cudadrv

import (
	"slices"
	"testing"
)

// TestMergePages: buffers that share a page become one page-aligned
// range; ranges that only touch, or lie apart, stay separate; the order
// of the buffers does not matter.
func TestMergePages(t *testing.T) {
	t.Parallel()
	const page = 4096
	for _, tc := range []struct {
		name  string
		spans []pageSpan
		want  []pageSpan
	}{
		{"one buffer inside a page", []pageSpan{{100, 200}}, []pageSpan{{0, page}}},
		{"neighbours in one page", []pageSpan{{100, 200}, {232, 4000}}, []pageSpan{{0, page}}},
		{"a run sharing pages", []pageSpan{{8192 + 10, 3*page + 5}, {3*page + 64, 5*page + 16}, {5*page + 32, 5*page + 40}}, []pageSpan{{2 * page, 6 * page}}},
		{"touching pages stay apart", []pageSpan{{0, page}, {page, 2 * page}}, []pageSpan{{0, page}, {page, 2 * page}}},
		{"apart, out of order", []pageSpan{{10 * page, 10*page + 1}, {3, 9}}, []pageSpan{{0, page}, {10 * page, 11 * page}}},
		{"nested", []pageSpan{{0, 5 * page}, {page + 3, page + 9}}, []pageSpan{{0, 5 * page}}},
	} {
		if got := mergePages(tc.spans, page); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
