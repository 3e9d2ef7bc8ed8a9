package cpubench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/strata-llm/strata/engine/gemv"
	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/internal/hostmem"
)

// The shape of every GEMV: an 8B model's FFN up or gate projection (the
// widest of its matrices), 14336 rows of 4096 elements.
const (
	gemvN    = 4096
	gemvRows = 14336
)

// matrices is one kind's weights: count matrices of rows × gemvN, one
// after another in region.
type matrices struct {
	t      quant.Type
	region *hostmem.Region
	rb     int // bytes a row
	rows   int
	count  int
}

// newMatrices lays out about size bytes of t (at least two matrices,
// fewer rows a matrix when size is small) and fills them with realistic
// random weights: the first matrix from quant.FillRandomRows, copied to
// the others (which writes every page before any timing).
func newMatrices(t quant.Type, size int64) (*matrices, error) {
	rb64, err := t.RowBytes(gemvN)
	if err != nil {
		return nil, err
	}
	rb := int(rb64)
	rows := gemvRows
	if int64(2*rows*rb) > size {
		rows = max(16, int(size/int64(2*rb))/16*16)
	}
	count := max(2, int((size+int64(rows*rb)-1)/int64(rows*rb)))
	mb := rows * rb
	r, err := hostmem.Alloc(count*mb, hostmem.AllocOptions{HugePages: true})
	if err != nil {
		return nil, err
	}
	b := r.Bytes()
	if err := quant.FillRandomRows(t, b[:mb], gemvN, 1, 0.02); err != nil {
		r.Free()
		return nil, err
	}
	for i := 1; i < count; i++ {
		copy(b[i*mb:(i+1)*mb], b[:mb])
	}
	return &matrices{t: t, region: r, rb: rb, rows: rows, count: count}, nil
}

func (m *matrices) matrix(i int) []byte {
	mb := m.rows * m.rb
	return m.region.Bytes()[i*mb : (i+1)*mb]
}

func (m *matrices) bytes() int64 { return int64(m.count * m.rows * m.rb) }

// gemvRate is the rate (weight bytes per second) of products over every
// matrix of m in turn on a pool of the threads of cpus, the vector
// quantized once per product as a decode step does. The calling
// goroutine is the pool's thread 0 and should be pinned to cpus[0].
func gemvRate(ctx context.Context, impl gemv.Impl, m *matrices, cpus []int, d time.Duration) (rate, error) {
	pool, err := gemv.NewPool(gemv.PoolOptions{CPUs: cpus})
	if err != nil {
		return rate{}, err
	}
	r := rand.New(rand.NewPCG(1, 2))
	v := make([]float32, gemvN)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	y := make([]float32, m.rows)
	var x gemv.X
	var perr error
	product := func(i int) {
		if err := x.Set(v); err != nil && perr == nil {
			perr = err
		}
		if err := pool.Rows(impl, m.t, m.matrix(i), gemvN, &x, y); err != nil && perr == nil {
			perr = err
		}
	}
	product(0) // the workers and the code warm
	res, err := measure(ctx, d, m.bytes(), func() time.Duration {
		t0 := time.Now()
		for i := range m.count {
			product(i)
		}
		return time.Since(t0)
	})
	err = errors.Join(err, perr, pool.Close())
	if err != nil {
		return rate{}, fmt.Errorf("%v GEMV with %d threads: %w", m.t, len(cpus), err)
	}
	return res, nil
}
