package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
)

// ExpertStats counts how a mixture-of-experts model's expert uses were
// served: from resident experts, from a read buffer that still held the
// expert, or by a read from storage.
type ExpertStats struct {
	Resident, Buffered, Read uint64
	// ReadBytes and ReadTime are the storage reads' bytes and wall time
	// (reads of one layer run concurrently).
	ReadBytes int64
	ReadTime  time.Duration
	// Failed counts reads that failed or did not match the checksum.
	Failed uint64
}

// Uses is every expert use counted.
func (s ExpertStats) Uses() uint64 { return s.Resident + s.Buffered + s.Read }

// expertStore is a MoE pool's experts as the CPU model's
// model.ExpertSource: resident experts (tier.PlanExperts' choice) are
// views of the pool's memory, verified at load; the others stay in the
// pool file and are read, when a pass routes a token to them, into read
// buffers that keep the latest ones (least recently used goes first).
type expertStore struct {
	pool     *prefab.Pool
	src      tier.Source
	plan     tier.ExpertPlan
	verify   stream.VerifyMode
	resident [][]*model.Expert // nil where the expert is on storage
	verified [][]bool          // storage experts checked once (VerifyFirst)

	mu    sync.Mutex
	bufs  []expertBuf
	clock uint64
	stats ExpertStats
}

// expertBuf is one read buffer and the expert it holds (layer -1: none).
type expertBuf struct {
	b             *tier.Buffer
	layer, expert int
	x             model.Expert
	data          []byte // the expert's extent in b
	used          uint64 // the clock of its last use
}

// newExpertStore loads plan's resident experts from pool (verifying each)
// and allocates the read buffers from src, which serves the rest.
func newExpertStore(ctx context.Context, pool *prefab.Pool, src tier.Source, plan tier.ExpertPlan, verify stream.VerifyMode) (*expertStore, error) {
	s := &expertStore{pool: pool, src: src, plan: plan, verify: verify}
	s.resident = make([][]*model.Expert, len(plan.Resident))
	s.verified = make([][]bool, len(plan.Resident))
	for l, rs := range plan.Resident {
		s.resident[l] = make([]*model.Expert, len(rs))
		s.verified[l] = make([]bool, len(rs))
		for e, r := range rs {
			if !r {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("loading experts at layer %d: %w", l, err)
			}
			b, err := pool.MappedExpert(l, e)
			if err != nil {
				return nil, err
			}
			x, err := pool.DecodeExpert(l, e, b)
			if err != nil {
				return nil, err
			}
			s.resident[l][e] = &x
		}
	}
	if plan.Buffers > 0 && src == nil {
		return nil, errors.New("experts on storage but no source to read them from")
	}
	for range plan.Buffers {
		b, err := src.Alloc(int(plan.BufferBytes))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("expert read buffer: %w", err)
		}
		s.bufs = append(s.bufs, expertBuf{b: b, layer: -1})
	}
	return s, nil
}

// Experts implements model.ExpertSource.
func (s *expertStore) Experts(ctx context.Context, l int, es []int, dst []*model.Expert) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l < 0 || l >= len(s.resident) {
		return fmt.Errorf("layer %d out of range [0, %d)", l, len(s.resident))
	}
	s.clock++
	var miss []int // indexes into es
	for j, e := range es {
		if e < 0 || e >= len(s.resident[l]) {
			return fmt.Errorf("expert %d out of range [0, %d)", e, len(s.resident[l]))
		}
		if x := s.resident[l][e]; x != nil {
			dst[j] = x
			s.stats.Resident++
			continue
		}
		if k := s.holding(l, e); k >= 0 {
			s.bufs[k].used = s.clock
			dst[j] = &s.bufs[k].x
			s.stats.Buffered++
			continue
		}
		miss = append(miss, j)
	}
	if len(miss) == 0 {
		return nil
	}
	// The least recently used buffers not serving this call take the
	// misses; the plan has a buffer for every storage expert of a layer.
	victims := make([]int, 0, len(miss))
	for range miss {
		k := -1
		for i := range s.bufs {
			if s.bufs[i].used != s.clock && (k < 0 || s.bufs[i].used < s.bufs[k].used) {
				k = i
			}
		}
		if k < 0 {
			return fmt.Errorf("layer %d: %d experts to read and no free read buffer (%d in all)", l, len(miss), len(s.bufs))
		}
		s.bufs[k].used = s.clock
		victims = append(victims, k)
	}
	t0 := time.Now()
	errs := make([]error, len(miss))
	var wg sync.WaitGroup
	for i, j := range miss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.read(ctx, l, es[j], &s.bufs[victims[i]])
		}()
	}
	wg.Wait()
	s.stats.ReadTime += time.Since(t0)
	var failed []error
	for i, j := range miss {
		b := &s.bufs[victims[i]]
		if errs[i] != nil {
			b.layer, b.used = -1, 0
			s.stats.Failed++
			failed = append(failed, errs[i])
			continue
		}
		dst[j] = &b.x
		s.stats.Read++
		s.stats.ReadBytes += int64(len(b.data))
	}
	return errors.Join(failed...)
}

// holding returns the buffer holding layer l's expert e, or -1.
func (s *expertStore) holding(l, e int) int {
	for i := range s.bufs {
		if s.bufs[i].layer == l && s.bufs[i].expert == e {
			return i
		}
	}
	return -1
}

// read reads layer l's expert e into b, verifies it (always, or the first
// time under VerifyFirst) and decodes it. It runs with s.mu held by the
// caller, concurrently with reads into other buffers.
func (s *expertStore) read(ctx context.Context, l, e int, b *expertBuf) error {
	b.layer = -1
	ext, err := s.pool.ExpertExtent(l, e)
	if err != nil {
		return err
	}
	data := b.b.Bytes()[:ext.Length]
	if err := s.src.ReadAt(ctx, data, ext.Offset); err != nil {
		return fmt.Errorf("reading layer %d expert %d (bytes [%d, %d)): %w", l, e, ext.Offset, ext.Offset+ext.Length, err)
	}
	if s.verify == stream.VerifyAlways || !s.verified[l][e] {
		if err := s.pool.VerifyExpert(l, e, data); err != nil {
			return err
		}
		s.verified[l][e] = true
	}
	x, err := s.pool.DecodeExpert(l, e, data)
	if err != nil {
		return err
	}
	b.x, b.layer, b.expert, b.data = x, l, e, data
	return nil
}

// Stats returns the counts so far.
func (s *expertStore) Stats() ExpertStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// close frees the read buffers.
func (s *expertStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i := range s.bufs {
		errs = append(errs, s.bufs[i].b.Free())
	}
	s.bufs = nil
	return errors.Join(errs...)
}
