package tier

import (
	"bytes"
	"testing"
)

// FuzzParseMemInfo feeds arbitrary /proc/meminfo files to the parser the
// planner's default budgets come from: it never panics, and what it
// accepts is non-negative, within the bound it enforces.
func FuzzParseMemInfo(f *testing.F) {
	f.Add([]byte("MemTotal:       65843212 kB\nMemFree:         1234 kB\nMemAvailable:   40000000 kB\n"))
	f.Add([]byte("MemTotal: 1\nMemAvailable: 2\n"))
	f.Add([]byte("MemTotal: x kB\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		mi, err := parseMemInfo(bytes.NewReader(data))
		if err != nil {
			return
		}
		if mi.Total < 0 || mi.Available < 0 || mi.Total > 1<<60 || mi.Available > 1<<60 {
			t.Fatalf("accepted %+v from %q", mi, data)
		}
	})
}
