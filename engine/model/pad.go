package model

import (
	"errors"
	"fmt"
	"math"

	"github.com/strata-llm/strata/engine/quant"
)

// NeedsPadding reports whether c's head dim or FFN width is not a multiple
// of mult (the GPU kernels' granule), so that PadWidths must widen the
// model before those kernels can run it.
func NeedsPadding(c Config, mult int) bool {
	return c.HeadDim%mult != 0 || c.FFN%mult != 0
}

// PadWidths returns c and w widened so that the head dim and the FFN width
// are multiples of mult, computing the same outputs up to float rounding:
//   - each head's q, k and v rows are followed by zero rows, and the output
//     projection's columns of each head by zero columns: a zero query or
//     key dimension adds nothing to a score, a zero value dimension nothing
//     to the output; the score scale stays that of the true head dim;
//   - RoPE keeps its frequencies through the divisor table (RopeFreqs):
//     the true pairs rotate as before, the added ones rotate zeros;
//   - gate and up get zero rows and down zero columns: silu(0)·0 adds 0.
//
// Only llama's interleaved RoPE keeps a head's true dimensions in pairs of
// their own after padding (rotate-half pairs would straddle the zeros), so
// other architectures are refused, as are mixture-of-experts models. The
// widened matrices are stored as F32; the others are shared with w. It is
// for small models (stories260K's heads of 8): widths four times larger
// cost little there.
func PadWidths(c Config, w *Weights, mult int) (Config, *Weights, error) {
	if mult <= 0 || mult%2 != 0 {
		return c, nil, fmt.Errorf("pad widths: granule %d is not a positive even number", mult)
	}
	if c.Arch != ArchLlama || c.QKNorm() || c.QKVBias() || c.Fused() || c.MoE() {
		return c, nil, fmt.Errorf("pad widths: %s models are not padded (only llama's interleaved RoPE keeps a head's pairs apart from the padding)", c.Arch)
	}
	if c.Dim%mult != 0 {
		return c, nil, fmt.Errorf("pad widths: the model width %d is not a multiple of %d", c.Dim, mult)
	}
	if w == nil || len(w.Layers) != c.Layers {
		return c, nil, errors.New("pad widths: weights do not match the config")
	}
	hd, hdP := c.HeadDim, (c.HeadDim+mult-1)/mult*mult
	fP := (c.FFN + mult - 1) / mult * mult
	p := c
	p.HeadDim, p.FFN = hdP, fP
	if hdP != hd {
		// freq_i = theta^(-2i/hd) / div_i must hold with hdP in place of
		// hd: div'_i = div_i · theta^(2i/hd - 2i/hdP).
		p.RopeFreqs = make([]float32, hdP/2)
		for i := range p.RopeFreqs {
			p.RopeFreqs[i] = 1
			if i < hd/2 {
				d := 1.0
				if c.RopeFreqs != nil {
					d = float64(c.RopeFreqs[i])
				}
				p.RopeFreqs[i] = float32(d * math.Pow(c.RopeTheta, 2*float64(i)/float64(hd)-2*float64(i)/float64(hdP)))
			}
		}
	}
	out := &Weights{Embed: w.Embed, OutputNorm: w.OutputNorm, Output: w.Output, Layers: make([]Layer, len(w.Layers))}
	for i := range w.Layers {
		l, err := padLayer(&w.Layers[i], c, hdP, fP)
		if err != nil {
			return c, nil, fmt.Errorf("pad widths: layer %d: %w", i, err)
		}
		out.Layers[i] = l
	}
	if err := p.Validate(); err != nil {
		return c, nil, fmt.Errorf("pad widths: %w", err)
	}
	if err := p.check(out); err != nil {
		return c, nil, fmt.Errorf("pad widths: %w", err)
	}
	return p, out, nil
}

// padLayer widens one layer's attention heads to hdP and its FFN to fP.
func padLayer(l *Layer, c Config, hdP, fP int) (Layer, error) {
	out := *l
	hd, f := c.HeadDim, c.FFN
	var err error
	rows := func(t *Tensor, heads int) {
		if err == nil {
			*t, err = padRows(t, heads, hd, hdP)
		}
	}
	rows(&out.Q, c.Heads)
	rows(&out.K, c.KVHeads)
	rows(&out.V, c.KVHeads)
	if err == nil {
		out.O, err = padCols(&l.O, c.Heads, hd, hdP)
	}
	// The FFN is one group of f rows (or columns) widened to fP.
	if err == nil {
		out.Gate, err = padRows(&l.Gate, 1, f, fP)
	}
	if err == nil {
		out.Up, err = padRows(&l.Up, 1, f, fP)
	}
	if err == nil {
		out.Down, err = padCols(&l.Down, 1, f, fP)
	}
	return out, err
}

// padRows returns t (heads groups of n rows) with every group followed by
// zero rows up to m rows, as F32; t itself when n == m.
func padRows(t *Tensor, heads, n, m int) (Tensor, error) {
	if n == m {
		return *t, nil
	}
	src, err := f32Rows(t)
	if err != nil {
		return Tensor{}, err
	}
	dst := make([]float32, heads*m*t.Cols)
	for h := range heads {
		copy(dst[h*m*t.Cols:], src[h*n*t.Cols:(h+1)*n*t.Cols])
	}
	return F32Tensor(t.Name, heads*m, t.Cols, dst), nil
}

// padCols returns t with each row's heads groups of n columns followed by
// zero columns up to m, as F32; t itself when n == m.
func padCols(t *Tensor, heads, n, m int) (Tensor, error) {
	if n == m {
		return *t, nil
	}
	src, err := f32Rows(t)
	if err != nil {
		return Tensor{}, err
	}
	dst := make([]float32, t.Rows*heads*m)
	for r := range t.Rows {
		for h := range heads {
			copy(dst[(r*heads+h)*m:], src[r*t.Cols+h*n:r*t.Cols+(h+1)*n])
		}
	}
	return F32Tensor(t.Name, t.Rows, heads*m, dst), nil
}

// f32Rows decodes t to float32 values, row after row.
func f32Rows(t *Tensor) ([]float32, error) {
	v := make([]float32, t.Rows*t.Cols)
	if err := quant.DequantizeRows(t.Type, t.Data, t.Cols, v); err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return v, nil
}
