package kernels

import (
	"fmt"

	"github.com/strata-llm/strata/engine/quant"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// q6kaBlock is the bytes of one super-block, Q6_K's and Q6KA's.
const q6kaBlock = 210

// matrixType is the element format a matrix of type t is encoded from:
// Q6KA's is Q6_K (sizes, units, alignment rules); every other type its
// own.
func matrixType(t quant.Type) quant.Type {
	if t == quant.Q6KA {
		return quant.Q6_K
	}
	return t
}

// q6kaPad is the misc bytes a re-laid block at address a starts with.
func q6kaPad(a uint64) int { return int(-a & 15) }

// RelayQ6KHost re-lays whole Q6_K super-blocks src into dst (the same
// length, a multiple of 210 bytes; they may not overlap) as Q6KA for a
// device address addr of dst[0]: q6ka_relay's permutation, on the host.
// addr must be even.
func RelayQ6KHost(dst, src []byte, addr uint64) error {
	if err := checkQ6KA(dst, src, addr); err != nil {
		return err
	}
	for o := 0; o < len(src); o += q6kaBlock {
		relayBlock(dst[o:o+q6kaBlock], src[o:o+q6kaBlock], q6kaPad(addr+uint64(o)))
	}
	return nil
}

func checkQ6KA(dst, src []byte, addr uint64) error {
	if len(src)%q6kaBlock != 0 || len(dst) != len(src) {
		return fmt.Errorf("q6ka: %d bytes into %d: want equal lengths, a multiple of %d", len(src), len(dst), q6kaBlock)
	}
	if addr%2 != 0 {
		return fmt.Errorf("q6ka: device address %#x is odd", addr)
	}
	return nil
}

// q6kaPerm calls f(q6k, q6ka) for every byte of a block: its offset in
// Q6_K (ql[128], qh[64], scales[16], d[2]) and in Q6KA with pad p.
func q6kaPerm(p int, f func(q6k, q6ka int)) {
	for k := 0; k < 4; k++ { // unit k = 2n + h of half n
		n, h := k>>1, k&1
		for j := 0; j < 16; j++ {
			f(64*n+16*h+j, p+48*k+j)
			f(64*n+32+16*h+j, p+48*k+16+j)
			f(128+32*n+16*h+j, p+48*k+32+j)
		}
	}
	// Misc: unit k's scales (quarter qq: scale 8n + 2qq + h) at e + 4k + qq,
	// d at 16 (e = 0) or 0 (e = 2), e = p & 2: every scale word 4-byte
	// aligned.
	e := p & 2
	for k := 0; k < 4; k++ {
		for qq := 0; qq < 4; qq++ {
			f(192+8*(k>>1)+2*qq+k&1, q6kaMisc(p, e+4*k+qq))
		}
	}
	d := 16
	if e != 0 {
		d = 0
	}
	f(208, q6kaMisc(p, d))
	f(209, q6kaMisc(p, d+1))
}

// q6kaMisc is where misc byte i of a re-laid block with pad p sits.
func q6kaMisc(p, i int) int {
	if i >= p {
		return i + 192
	}
	return i
}

func relayBlock(dst, src []byte, p int) {
	q6kaPerm(p, func(q6k, q6ka int) { dst[q6ka] = src[q6k] })
}

// RelayQ6K re-lays the Q6_K matrix m in place on stream s (q6ka_relay)
// and returns it as Q6KA. m must stay at this address: the layout depends
// on it. Matrices that are not Q6_K, or whose address is odd, are an
// error.
func (k *Kernels) RelayQ6K(c *cudadrv.Ctx, s cudadrv.Stream, m Matrix) (Matrix, error) {
	if m.Type != quant.Q6_K || m.Cols%quant.QK_K != 0 || m.Rows < 1 || m.Ptr == 0 || m.Ptr%2 != 0 {
		return m, fmt.Errorf("relay Q6_K: a %v %dx%d matrix at %#x: want Q6_K, whole super-blocks, an even address",
			m.Type, m.Rows, m.Cols, uint64(m.Ptr))
	}
	f, err := k.fn("q6ka_relay")
	if err != nil {
		return m, err
	}
	n := int64(m.Rows) * int64(m.Cols/quant.QK_K)
	var a cudadrv.Args
	a.Ptr(m.Ptr).I64(n)
	cfg := cudadrv.LaunchConfig{Grid: cudadrv.Dim3{X: uint32((n + 255) / 256)}, Block: cudadrv.Dim3{X: 256}}
	if err := k.run(c, f, cfg, s, &a); err != nil {
		return m, fmt.Errorf("relay Q6_K %dx%d: %w", m.Rows, m.Cols, err)
	}
	m.Type = quant.Q6KA
	return m, nil
}
