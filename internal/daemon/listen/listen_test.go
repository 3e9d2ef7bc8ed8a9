package listen

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnixNeverClobbersLiveSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "s.sock")
	l, err := Unix(path, 0o660, -1)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 {
		t.Errorf("mode %v, want 0660", st.Mode().Perm())
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Unix(path, 0o660, -1); !errors.Is(err, ErrInUse) {
		t.Fatalf("second listener: %v, want ErrInUse", err)
	}
	// The live socket still works.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("live socket was disturbed: %v", err)
	}
	c.Close()
	l.Close()
}

func TestUnixReplacesStaleSocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // leaves a socket file nobody listens on
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	l2, err := Unix(path, 0o600, os.Getgid())
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}

func TestUnixKeepsRegularFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Unix(path, 0o660, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("regular file was touched")
	}
}

func TestSystemdWithoutActivation(t *testing.T) {
	t.Setenv("LISTEN_FDS", "")
	t.Setenv("LISTEN_PID", "")
	u, tc, err := Systemd()
	if err != nil || len(u) != 0 || len(tc) != 0 {
		t.Fatalf("got %v %v %v", u, tc, err)
	}
}
