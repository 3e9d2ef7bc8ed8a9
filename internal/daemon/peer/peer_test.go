package peer

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromConnSeesOwnProcess(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan Cred, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		defer c.Close()
		cr, err := FromConn(c)
		if err != nil {
			t.Error(err)
		}
		done <- cr
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cr := <-done
	if cr.PID != os.Getpid() || cr.UID != os.Getuid() || cr.GID != os.Getgid() {
		t.Fatalf("cred %+v, want pid %d uid %d gid %d", cr, os.Getpid(), os.Getuid(), os.Getgid())
	}
	gs, err := Groups("/proc", cr)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.Getgroups()
	if len(gs) != len(want) {
		t.Fatalf("groups %v, want %v", gs, want)
	}
}

func TestFromConnRejectsTCP(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := FromConn(c); err != ErrNotUnix {
		t.Fatalf("got %v, want ErrNotUnix", err)
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, status string
		uid          int
		want         []int
		wantErr      string
	}{
		{"plain", "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t4 27 998 \n", 1000, []int{4, 27, 998}, ""},
		{"no groups", "Uid:\t0\t0\t0\t0\nGroups:\t\n", 0, nil, ""},
		{"uid mismatch", "Uid:\t1001\t1001\t1001\t1001\nGroups:\t4\n", 1000, nil, "pid reused"},
		{"missing groups", "Uid:\t1000\t1000\t1000\t1000\n", 1000, nil, "no Uid or Groups"},
		{"garbage groups", "Uid:\t1000\nGroups:\tx\n", 1000, nil, "bad Groups"},
		{"garbage uid", "Uid:\tx\nGroups:\t1\n", 1000, nil, "bad Uid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStatus(strings.NewReader(tc.status), "status", tc.uid)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v want %v", got, tc.want)
				}
			}
		})
	}
}
