package pci

import "testing"

func TestParseBDF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"0000:00:04.0", "0000:00:04.0", true},
		{"00:04.0", "0000:00:04.0", true},
		{"0000:AF:1f.7", "0000:af:1f.7", true},
		{"1:2:3.4", "0001:02:03.4", true},
		{"0000:00:20.0", "", false}, // device > 31
		{"0000:00:04.8", "", false}, // function > 7
		{"0000:00:04", "", false},
		{"0000:100:04.0", "", false},
		{"../../etc:00:04.0", "", false},
		{"", "", false},
		{"0000:00:04.0\n", "", false},
		{"0000:00:-4.0", "", false},
	} {
		got, err := ParseBDF(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBDF(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
