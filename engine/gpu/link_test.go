package gpu

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestRateOver: a flow's rate over a window is its marks' bytes
// interpolated at the window's ends; a window the marks do not cover, or
// an empty one, is an error rather than a figure from outside the flow.
func TestRateOver(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// 100 bytes a millisecond for 10 ms, then 50 a millisecond for 10.
	marks := []copyMark{{at(0), 0}, {at(10), 1000}, {at(20), 1500}}
	for _, tc := range []struct {
		name     string
		from, to time.Time
		want     float64 // bytes a second; 0: an error
	}{
		{"first stretch", at(0), at(10), 100e3},
		{"inside the first", at(2), at(6), 100e3},
		{"across both", at(5), at(15), (500 + 250) / 10e-3},
		{"the whole", at(0), at(20), 1500 / 20e-3},
		{"starts before the marks", at(-1), at(10), 0},
		{"ends after the marks", at(5), at(21), 0},
		{"empty", at(5), at(5), 0},
		{"backwards", at(6), at(5), 0},
	} {
		got, err := rateOver(marks, tc.from, tc.to)
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("%s: rate %g, want an error", tc.name, got)
		case tc.want != 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != 0 && math.Abs(got-tc.want) > 1e-6*tc.want:
			t.Errorf("%s: rate %g, want %g", tc.name, got, tc.want)
		}
	}
	if _, err := rateOver(marks[:1], at(0), at(0).Add(time.Nanosecond)); err == nil {
		t.Error("one mark: no error")
	}
}

// TestHostToDeviceBeside: the copies run across the whole of the other
// reader's window, at a rate no higher than the link's peak alone (the
// reader here only sleeps, so near it), and the reader's error comes
// back as the probe's.
func TestHostToDeviceBeside(t *testing.T) {
	dev, _ := gpu(t)
	peak, err := HostToDevicePeak(dev, 64<<20, 8)
	if err != nil {
		t.Fatal(err)
	}
	var began time.Time
	r, err := HostToDeviceBeside(dev, 64<<20, func() (time.Time, time.Time, error) {
		began = time.Now()
		time.Sleep(50 * time.Millisecond)
		from := time.Now()
		time.Sleep(200 * time.Millisecond)
		return from, time.Now(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("beside a sleeper %.1f GB/s, alone %.1f GB/s", r/1e9, peak/1e9)
	if began.IsZero() || !(r > 0.5*peak && r < 1.1*peak) {
		t.Errorf("beside a sleeper %.1f GB/s, alone %.1f GB/s: want 0.5-1.1 of alone", r/1e9, peak/1e9)
	}
	boom := errors.New("boom")
	if _, err := HostToDeviceBeside(dev, 64<<20, func() (time.Time, time.Time, error) {
		return time.Time{}, time.Time{}, boom
	}); !errors.Is(err, boom) {
		t.Errorf("the reader's error: got %v", err)
	}
}
