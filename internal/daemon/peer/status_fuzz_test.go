package peer

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzParseStatus feeds arbitrary /proc/PID/status files to the groups
// parser that decides who is an administrator: it never panics, and what
// it accepts has a Uid line naming the peer's uid and only the groups its
// Groups line lists.
func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Name:\tbash\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t4 27 1000 \n"), 1000)
	f.Add([]byte("Uid:\t0\t0\t0\t0\nGroups:\n"), 0)
	f.Add([]byte("Groups:\t1 2 3\n"), 5)
	f.Add([]byte("Uid:\t5\nGroups:\tx\n"), 5)
	f.Fuzz(func(t *testing.T, data []byte, uid int) {
		groups, err := parseStatus(bytes.NewReader(data), "status", uid)
		if err != nil {
			return
		}
		if !bytes.Contains(data, []byte("Uid:")) || !bytes.Contains(data, []byte("Groups:")) {
			t.Fatalf("accepted %q without a Uid and a Groups line: %v", data, groups)
		}
		for _, g := range groups {
			if g < 0 {
				t.Fatalf("negative group %d from %q", g, data)
			}
		}
		_ = slices.Contains(groups, 0)
	})
}
