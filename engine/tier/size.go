package tier

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits maps size suffixes (lower case) to multipliers. Binary prefixes
// (KiB, MiB, ...) and the bare single letters (K, M, G, T, P, as dd and
// most tools read them) are powers of 1024; KB, MB, GB, TB, PB are powers
// of 1000, as disk and link vendors quote them. Peta is there because
// FormatBytes prints it, and what it prints must parse.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	"p": 1 << 50, "pib": 1 << 50, "pb": 1e15,
}

// ParseBytes parses a size such as "24GiB", "512M", "1.5 TB" or "4096".
// Units are case-insensitive; see byteUnits for their values. Negative,
// non-finite and out-of-range sizes are errors.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 24GiB", s)
	}
	mul, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB, K, M, G, T or P)", s, t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	b := v * mul
	if math.IsNaN(b) || b < 0 || b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return int64(math.Round(b)), nil
}

// ParseRate parses a bandwidth such as "3.5GB/s", "25GiB/s" or "3GB" (the
// "/s" is optional) into bytes per second. It must be positive.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "ps")
	b, err := ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	if b <= 0 {
		return 0, fmt.Errorf("rate %q must be positive", s)
	}
	return float64(b), nil
}

// FormatBytes renders n with a binary unit and three significant digits
// ("24.0 GiB", "512 MiB", "4.00 KiB", "100 B").
func FormatBytes(n int64) string {
	if n < 0 {
		return "-" + FormatBytes(-n)
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	u := 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	switch {
	case u == 0:
		return fmt.Sprintf("%d B", n)
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, units[u])
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, units[u])
	}
	return fmt.Sprintf("%.2f %s", v, units[u])
}

// FormatRate renders a bandwidth in decimal GB/s or MB/s, as links are
// usually quoted.
func FormatRate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.1f GB/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.0f MB/s", bps/1e6)
	}
	return fmt.Sprintf("%.0f B/s", bps)
}
