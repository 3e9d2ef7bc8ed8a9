package plot

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a chart.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is a line chart.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	// LogX puts x on a log2 scale with a tick at every power of two; every
	// x must then be positive.
	LogX bool
	// XTick formats x tick labels (default: %g).
	XTick  func(float64) string
	Series []Series
	// Width and Height in pixels (default 860 × 520).
	Width, Height int
}

// ErrEmpty is returned for a chart without any point.
var ErrEmpty = errors.New("plot: nothing to draw")

// palette holds distinguishable line colours (Okabe–Ito, then greys).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000", "#777777", "#BBBBBB"}

// check validates the series and returns the data's bounds.
func (c *Chart) check() (x0, x1, y1 float64, err error) {
	x0, x1, y1 = math.Inf(1), math.Inf(-1), 0
	n := 0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, 0, fmt.Errorf("plot: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				return 0, 0, 0, fmt.Errorf("plot: series %q point %d is not finite", s.Name, i)
			}
			if c.LogX && x <= 0 {
				return 0, 0, 0, fmt.Errorf("plot: series %q point %d: x %g on a log axis", s.Name, i, x)
			}
			x0, x1, y1 = min(x0, x), max(x1, x), max(y1, y)
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0, ErrEmpty
	}
	return x0, x1, y1, nil
}

// niceStep returns a 1-2-5 step giving about n ticks up to hi.
func niceStep(hi float64, n int) float64 {
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// WriteSVG renders the chart.
func (c Chart) WriteSVG(w io.Writer) error {
	x0, x1, ymax, err := c.check()
	if err != nil {
		return err
	}
	W, H := c.Width, c.Height
	if W <= 0 {
		W = 860
	}
	if H <= 0 {
		H = 520
	}
	const left, right, top, bottom = 80.0, 170.0, 50.0, 64.0
	pw, ph := float64(W)-left-right, float64(H)-top-bottom
	xt := c.XTick
	if xt == nil {
		xt = func(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
	}

	// x scale
	fx := func(v float64) float64 { return v }
	if c.LogX {
		fx = math.Log2
	}
	lo, hi := fx(x0), fx(x1)
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	px := func(v float64) float64 { return left + (fx(v)-lo)/(hi-lo)*pw }
	// y scale, from zero
	if ymax <= 0 {
		ymax = 1
	}
	step := niceStep(ymax, 5)
	ytop := math.Ceil(ymax/step) * step
	py := func(v float64) float64 { return top + ph - v/ytop*ph }

	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	p(`<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", W, H)
	if c.Title != "" {
		p(`<text x="%.1f" y="24" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`+"\n", left+pw/2, esc(c.Title))
	}
	// grid and y ticks
	p(`<g stroke="#e4e4e4" stroke-width="1">` + "\n")
	var yticks []float64
	for v := 0.0; v <= ytop+step/2; v += step {
		yticks = append(yticks, v)
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", left, py(v), left+pw, py(v))
	}
	var xticks []float64
	if c.LogX {
		for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
			if e >= lo-1e-9 && e <= hi+1e-9 {
				xticks = append(xticks, math.Exp2(e))
			}
		}
	} else {
		st := niceStep(x1-x0, 6)
		for v := math.Ceil(x0/st) * st; v <= x1+st/1e6; v += st {
			xticks = append(xticks, v)
		}
	}
	for _, v := range xticks {
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", px(v), top, px(v), top+ph)
	}
	p("</g>\n")
	// axes
	p(`<g stroke="black" stroke-width="1.2" fill="none"><path d="M%.1f %.1f V%.1f H%.1f"/></g>`+"\n", left, top, top+ph, left+pw)
	p(`<g text-anchor="end">` + "\n")
	for _, v := range yticks {
		p(`<text x="%.1f" y="%.1f">%s</text>`+"\n", left-6, py(v)+4, esc(strconv.FormatFloat(v, 'g', 4, 64)))
	}
	p("</g>\n")
	p(`<g text-anchor="middle">` + "\n")
	for _, v := range xticks {
		p(`<text x="%.1f" y="%.1f">%s</text>`+"\n", px(v), top+ph+18, esc(xt(v)))
	}
	p("</g>\n")
	if c.XLabel != "" {
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="13">%s</text>`+"\n", left+pw/2, float64(H)-16, esc(c.XLabel))
	}
	if c.YLabel != "" {
		p(`<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle" font-size="13">%s</text>`+"\n", top+ph/2, esc(c.YLabel))
	}
	// series
	for i, s := range c.Series {
		if len(s.X) == 0 {
			continue
		}
		col := palette[i%len(palette)]
		var d strings.Builder
		for j := range s.X {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, px(s.X[j]), py(s.Y[j]))
		}
		p(`<g><title>%s</title><path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", esc(s.Name), strings.TrimSpace(d.String()), col)
		for j := range s.X {
			p(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
				px(s.X[j]), py(s.Y[j]), col, esc(s.Name), esc(xt(s.X[j])), esc(strconv.FormatFloat(s.Y[j], 'f', 3, 64)))
		}
		p("</g>\n")
		ly := top + 10 + float64(i)*20
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left+pw+16, ly, left+pw+40, ly, col)
		p(`<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+46, ly+4, esc(s.Name))
	}
	p("</svg>\n")
	return bw.Flush()
}

// esc escapes text for XML character data and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
