package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/strata-llm/strata/bench"
)

// svgDoc is what the tests read back from a chart.
type svgDoc struct {
	root    string
	texts   []string
	paths   int
	circles int
	titles  []string
}

// parseSVG decodes every token, so that any malformed XML fails the test.
func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var d svgDoc
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if d.root == "" {
				d.root = e.Name.Space + " " + e.Name.Local
			}
			stack = append(stack, e.Name.Local)
			switch e.Name.Local {
			case "path":
				d.paths++
			case "circle":
				d.circles++
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && strings.TrimSpace(string(e)) != "" {
				switch stack[len(stack)-1] {
				case "text":
					d.texts = append(d.texts, string(e))
				case "title":
					d.titles = append(d.titles, string(e))
				}
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}
	return d
}

func TestStorageChart(t *testing.T) {
	t.Parallel()
	res := &bench.StorageResult{Target: bench.TargetInfo{Kind: "file", Name: "/data/<model>&.pool"}, Pattern: "seq", Via: "local"}
	for _, bs := range []int{4096, 65536, 1 << 20, 4 << 20} {
		for _, qd := range []int{1, 8, 32} {
			res.Points = append(res.Points, bench.StoragePoint{BlockSize: bs, QueueDepth: qd, GBps: float64(bs) / float64(4<<20) * float64(qd)})
		}
	}
	var buf bytes.Buffer
	if err := StorageChart(res).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	d := parseSVG(t, buf.Bytes())
	if d.root != "http://www.w3.org/2000/svg svg" {
		t.Fatalf("root %q", d.root)
	}
	// One line per queue depth plus the axes; a marker per point.
	if d.paths != 3+1 || d.circles != 12 {
		t.Fatalf("%d paths, %d circles", d.paths, d.circles)
	}
	for _, want := range []string{"qd 1", "qd 8", "qd 32", "block size", "GB/s", "4K", "8K", "1M", "4M", "file seq reads (/data/<model>&.pool, local)"} {
		if !slices.Contains(d.texts, want) {
			t.Errorf("no text %q in %q", want, d.texts)
		}
	}
	// log2 axis: a tick for every power of two from 4K to 4M.
	ticks := 0
	for _, s := range d.texts {
		if strings.HasSuffix(s, "K") || strings.HasSuffix(s, "M") {
			ticks++
		}
	}
	if ticks != 11 {
		t.Errorf("%d x ticks, want 11 (4K … 4M)", ticks)
	}
	if !slices.Contains(d.titles, "qd 32: 4M, 32.000") {
		t.Errorf("point titles %q", d.titles)
	}
}

func TestPCIeChart(t *testing.T) {
	t.Parallel()
	res := &bench.PCIeResult{Device: "GPU", Via: "stratad"}
	for _, n := range bench.DefaultPCIeSizes {
		for _, dir := range []bench.Direction{bench.HostToDevice, bench.DeviceToHost} {
			for _, m := range []bench.HostMemory{bench.Pinned, bench.Pageable} {
				res.Points = append(res.Points, bench.PCIePoint{Direction: dir, Memory: m, Bytes: n, GBps: math.Log2(float64(n))})
			}
		}
	}
	c := PCIeChart(res)
	if len(c.Series) != 4 || c.Series[0].Name != "H2D pinned" || len(c.Series[3].X) != len(bench.DefaultPCIeSizes) {
		t.Fatalf("series %+v", c.Series)
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	d := parseSVG(t, buf.Bytes())
	if d.paths != 5 || d.circles != 32 || !slices.Contains(d.texts, "1G") || !slices.Contains(d.texts, "64K") {
		t.Fatalf("%d paths %d circles, texts %q", d.paths, d.circles, d.texts)
	}
}

func TestChartErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    Chart
		want error
		text string
	}{
		{"empty", Chart{}, ErrEmpty, ""},
		{"no points", Chart{Series: []Series{{Name: "a"}}}, ErrEmpty, ""},
		{"lengths", Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}, nil, "2 x and 1 y"},
		{"log of zero", Chart{LogX: true, Series: []Series{{Name: "a", X: []float64{0, 2}, Y: []float64{1, 1}}}}, nil, "log axis"},
		{"NaN", Chart{Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{math.NaN()}}}}, nil, "not finite"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.WriteSVG(io.Discard)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err %v", err)
			}
		})
	}
	// A single point and all-zero values still draw (degenerate ranges).
	var buf bytes.Buffer
	if err := (Chart{Series: []Series{{Name: "one", X: []float64{3}, Y: []float64{0}}}}).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	parseSVG(t, buf.Bytes())
}
