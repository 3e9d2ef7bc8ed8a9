//go:build linux

package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// nobody is a uid other than ours for the ownership cases (they need root
// to chown).
const nobody = 65534

func TestPrivateDir(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	for _, tc := range []struct {
		name     string
		needRoot bool
		setup    func(t *testing.T, base string) string // returns the dir to make private
		unsafe   bool
	}{
		{"new, with parents", false, func(t *testing.T, base string) string {
			return filepath.Join(base, "a", "b", "strata")
		}, false},
		{"ours and readable: narrowed", false, func(t *testing.T, base string) string {
			d := filepath.Join(base, "strata")
			mustDo(t, os.Mkdir(d, 0o755))
			mustDo(t, os.Chmod(d, 0o755))
			return d
		}, false},
		{"ours, writable by others", false, func(t *testing.T, base string) string {
			d := filepath.Join(base, "strata")
			mustDo(t, os.Mkdir(d, 0o700))
			mustDo(t, os.Chmod(d, 0o777))
			return d
		}, true},
		{"a symlink to a directory", false, func(t *testing.T, base string) string {
			real := filepath.Join(base, "real")
			mustDo(t, os.Mkdir(real, 0o700))
			mustDo(t, os.Symlink(real, filepath.Join(base, "strata")))
			return filepath.Join(base, "strata")
		}, true},
		{"a file", false, func(t *testing.T, base string) string {
			mustDo(t, os.WriteFile(filepath.Join(base, "strata"), nil, 0o600))
			return filepath.Join(base, "strata")
		}, true},
		{"a symlink on the path", true, func(t *testing.T, base string) string {
			real := filepath.Join(base, "real")
			mustDo(t, os.Mkdir(real, 0o700))
			mustDo(t, os.Symlink(real, filepath.Join(base, "link")))
			return filepath.Join(base, "link", "strata")
		}, true},
		{"someone else's, in a sticky shared dir", true, func(t *testing.T, base string) string {
			shared := filepath.Join(base, "tmp")
			mustDo(t, os.Mkdir(shared, 0o777))
			mustDo(t, os.Chmod(shared, 0o777|os.ModeSticky))
			d := filepath.Join(shared, "strata")
			mustDo(t, os.Mkdir(d, 0o700))
			mustDo(t, os.Chown(d, nobody, nobody))
			return d
		}, true},
		{"new, in a sticky shared dir", false, func(t *testing.T, base string) string {
			shared := filepath.Join(base, "tmp")
			mustDo(t, os.Mkdir(shared, 0o777))
			mustDo(t, os.Chmod(shared, 0o777|os.ModeSticky))
			return filepath.Join(shared, "strata")
		}, false},
		{"in a shared dir without the sticky bit", false, func(t *testing.T, base string) string {
			shared := filepath.Join(base, "tmp")
			mustDo(t, os.Mkdir(shared, 0o777))
			mustDo(t, os.Chmod(shared, 0o777))
			return filepath.Join(shared, "strata")
		}, true},
		{"under someone else's directory", true, func(t *testing.T, base string) string {
			other := filepath.Join(base, "other")
			mustDo(t, os.Mkdir(other, 0o755))
			mustDo(t, os.Chown(other, nobody, nobody))
			return filepath.Join(other, "strata")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.needRoot && !root {
				t.Skip("needs root (chown, or root's no-symlink rule)")
			}
			d := tc.setup(t, t.TempDir())
			err := PrivateDir(d)
			if tc.unsafe {
				if !errors.Is(err, ErrUnsafe) {
					t.Fatalf("PrivateDir(%s): %v, want ErrUnsafe", d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			mustDo(t, unix.Lstat(d, &st))
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o700 || st.Uid != uint32(os.Geteuid()) {
				t.Fatalf("%s: mode %o uid %d, want a 0700 directory of ours", d, st.Mode, st.Uid)
			}
		})
	}
}

func TestCacheDirFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		euid int
		want string
	}{
		{map[string]string{"CACHE_DIRECTORY": "/var/cache/strata:/x", "HOME": "/root"}, 0, "/var/cache/strata"},
		{map[string]string{"XDG_CACHE_HOME": "/c", "HOME": "/h"}, 1000, "/c/strata"},
		{map[string]string{"HOME": "/h"}, 1000, "/h/.cache/strata"},
		{map[string]string{"XDG_CACHE_HOME": "rel", "HOME": "rel"}, 1000, "/tmp/strata-1000"},
		// A root daemon without HOME (a systemd unit without User=) no
		// longer shares a fixed directory in /tmp with everyone.
		{map[string]string{}, 0, "/var/cache/strata"},
		{map[string]string{"TMPDIR": "/run/user/1000"}, 1000, "/run/user/1000/strata-1000"},
	} {
		if got := cacheDirFor(func(k string) string { return tc.env[k] }, tc.euid); got != tc.want {
			t.Errorf("%v uid %d: %s, want %s", tc.env, tc.euid, got, tc.want)
		}
	}
}

// TestWriteFileIgnoresPlantedSymlinks: a symlink planted under the old
// temporary name (path+".tmp") or under path itself is never followed: the
// file it points at keeps its bytes, and path ends up a regular file.
func TestWriteFileIgnoresPlantedSymlinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	mustDo(t, os.WriteFile(victim, []byte("root's secret"), 0o600))
	path := filepath.Join(dir, "model.gguf")
	mustDo(t, os.Symlink(victim, path+".tmp"))
	mustDo(t, os.Symlink(victim, path))
	mustDo(t, WriteFile(path, []byte("model"), 0o644))
	if b, _ := os.ReadFile(victim); string(b) != "root's secret" {
		t.Fatalf("the symlink's target was written: %q", b)
	}
	if err := CheckOwned(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "model" {
		t.Fatalf("path holds %q", b)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".model.gguf.*.tmp"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestCheckOwned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	mustDo(t, os.WriteFile(ok, nil, 0o644))
	if err := CheckOwned(ok); err != nil {
		t.Fatal(err)
	}
	gw := filepath.Join(dir, "gw")
	mustDo(t, os.WriteFile(gw, nil, 0o600))
	mustDo(t, os.Chmod(gw, 0o664))
	link := filepath.Join(dir, "link")
	mustDo(t, os.Symlink(ok, link))
	fifo := filepath.Join(dir, "fifo")
	mustDo(t, unix.Mkfifo(fifo, 0o600))
	cases := []string{gw, link, fifo}
	if os.Geteuid() == 0 {
		other := filepath.Join(dir, "other")
		mustDo(t, os.WriteFile(other, nil, 0o644))
		mustDo(t, os.Chown(other, nobody, nobody))
		cases = append(cases, other)
	}
	for _, p := range cases {
		if err := CheckOwned(p); !errors.Is(err, ErrUnsafe) {
			t.Errorf("CheckOwned(%s): %v, want ErrUnsafe", filepath.Base(p), err)
		}
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
