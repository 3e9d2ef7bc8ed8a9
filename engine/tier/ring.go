package tier

import "fmt"

// RingAlign is the alignment of each streamed layer's place in the ring:
// kernels read a layer's tensors at their offsets from its start, which
// are 256-byte aligned. (The CPU backend's extents are whole pages, so
// its layers stay page-aligned.)
const RingAlign = 256

// Ring is where a pass's streamed layers land in the pipeline's device
// memory: one region of Capacity bytes (depth × the largest streamed
// layer, what depth whole-layer slots took), filled in pass order, each
// layer at the next aligned offset and back at the start when it would
// not fit before the end. A layer may be copied once compute has released
// every earlier layer whose bytes it overwrites; the last of those is
// After. With every layer the same size this is the ring of depth slots
// (layer n waits for layer n-depth); a pass whose layers are shorter
// (the hybrid placement copies only a layer's attention when the CPU
// takes its FFN) keeps more of them in flight in the same memory, so the
// copy engine runs further ahead.
type Ring struct {
	Capacity int64
	// Off is each streamed layer's offset in the ring, Size its aligned
	// length, After the index of the last earlier layer it overwrites (-1
	// for none): all in pass order.
	Off, Size []int64
	After     []int
}

// LayRing lays out layers of the given lengths (in pass order) in a ring
// of capacity bytes.
func LayRing(lengths []int64, capacity int64) (Ring, error) {
	r := Ring{Capacity: capacity, Off: make([]int64, len(lengths)), Size: make([]int64, len(lengths)), After: make([]int, len(lengths))}
	var head int64
	for n, l := range lengths {
		size := (l + RingAlign - 1) / RingAlign * RingAlign
		if l <= 0 || size > capacity {
			return Ring{}, fmt.Errorf("ring: layer %d of %d bytes in a ring of %d", n, l, capacity)
		}
		if head+size > capacity {
			head = 0
		}
		r.Off[n], r.Size[n], r.After[n] = head, size, -1
		head += size
		for m := n - 1; m >= 0; m-- {
			if r.Off[m] < r.Off[n]+size && r.Off[n] < r.Off[m]+r.Size[m] {
				r.After[n] = m
				break
			}
		}
	}
	return r, nil
}

// RingCapacity is the ring that depth slots of the largest of lengths
// would take.
func RingCapacity(lengths []int64, depth int) int64 {
	var big int64
	for _, l := range lengths {
		big = max(big, (l+RingAlign-1)/RingAlign*RingAlign)
	}
	return big * int64(depth)
}
