package tier

import (
	"testing"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"4096", 4096, false},
		{"24GiB", 24 << 30, false},
		{"24gib", 24 << 30, false},
		{"24G", 24 << 30, false},
		{"24GB", 24e9, false},
		{"1.5 TiB", 3 << 39, false},
		{"512M", 512 << 20, false},
		{"512MB", 512e6, false},
		{"4k", 4096, false},
		{"4KiB", 4096, false},
		{"10B", 10, false},
		{"4.93 PiB", 5550686540734136, false}, // as FormatBytes prints 5555555555555555
		{"2P", 2 << 50, false},
		{"1PB", 1e15, false},
		{" 2 GiB ", 2 << 30, false},
		{"0", 0, false},
		{"", 0, true},
		{"GiB", 0, true},
		{"-1G", 0, true},
		{"12XB", 0, true},
		{"1.2.3G", 0, true},
		{"99999999999TiB", 0, true},
		{"1e3", 0, true},
	}
	for _, c := range cases {
		got, err := ParseBytes(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseBytes(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want float64
		bad  bool
	}{
		{"3.5GB/s", 3.5e9, false},
		{"25GiB/s", 25 << 30, false},
		{"3GB", 3e9, false},
		{"800MBps", 800e6, false},
		{"0GB/s", 0, true},
		{"fast", 0, true},
	}
	for _, c := range cases {
		got, err := ParseRate(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("ParseRate(%q) = %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	cases := map[int64]string{
		100:            "100 B",
		4096:           "4.00 KiB",
		512 << 20:      "512 MiB",
		24 << 30:       "24.0 GiB",
		-(3 << 20):     "-3.00 MiB",
		1536 << 20:     "1.50 GiB",
		(1 << 40) * 12: "12.0 TiB",
	}
	for in, want := range cases {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
	if got := FormatRate(3.5e9); got != "3.5 GB/s" {
		t.Errorf("FormatRate = %q", got)
	}
}

// FuzzParseBytes checks that ParseBytes never panics and that accepted
// sizes are non-negative and print back to a size that parses.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"24GiB", "1.5TB", "0", "4k", "-1", "1e400G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		if _, err := ParseBytes(FormatBytes(n)); err != nil {
			t.Fatalf("FormatBytes(%d) = %q does not parse: %v", n, FormatBytes(n), err)
		}
	})
}
