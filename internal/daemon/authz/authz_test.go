package authz

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-llm/strata/internal/daemon/peer"
	"github.com/strata-llm/strata/internal/pathrace"
)

func TestOpenModel(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	models := filepath.Join(root, "models")
	other := filepath.Join(root, "other")
	for _, d := range []string{models, other, filepath.Join(models, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(models, "a.gguf"))
	write(filepath.Join(models, "sub", "b.gguf"))
	write(filepath.Join(other, "secret"))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(other, "secret"), filepath.Join(models, "escape.gguf")))
	must(os.Symlink(other, filepath.Join(models, "escdir")))
	must(os.Symlink("a.gguf", filepath.Join(models, "alias.gguf")))
	must(os.Symlink("../a.gguf", filepath.Join(models, "sub", "up.gguf")))
	must(os.Symlink(filepath.Join(models, "a.gguf"), filepath.Join(models, "absalias.gguf")))
	must(os.Symlink("/proc/self/root/etc/passwd", filepath.Join(models, "magic.gguf")))
	must(unix.Mkfifo(filepath.Join(models, "fifo.gguf"), 0o644))

	dirs := []string{models}
	tests := []struct {
		name, path string
		want       string // the file opened, relative to root; "" when an error is wanted
		err        error
		walkErr    error // what the O_NOFOLLOW fallback gives instead, if it differs
	}{
		{"relative", "a.gguf", "models/a.gguf", nil, nil},
		{"absolute", filepath.Join(models, "a.gguf"), "models/a.gguf", nil, nil},
		{"subdir", "sub/b.gguf", "models/sub/b.gguf", nil, nil},
		{"inner relative symlink", "alias.gguf", "models/a.gguf", nil, ErrOutsideModelDirs},
		{"inner symlink up", "sub/up.gguf", "models/a.gguf", nil, ErrOutsideModelDirs},
		{"inner absolute symlink", "absalias.gguf", "", ErrOutsideModelDirs, nil},
		{"magic link", "magic.gguf", "", ErrOutsideModelDirs, nil},
		{"dotdot", "../other/secret", "", ErrOutsideModelDirs, nil},
		{"dotdot inside", "sub/../a.gguf", "", ErrOutsideModelDirs, nil},
		{"absolute outside", filepath.Join(other, "secret"), "", ErrOutsideModelDirs, nil},
		{"symlink escape", "escape.gguf", "", ErrOutsideModelDirs, nil},
		{"dir symlink escape", "escdir/secret", "", ErrOutsideModelDirs, nil},
		{"missing", "nope.gguf", "", fs.ErrNotExist, nil},
		{"directory", "sub", "", ErrNotRegular, nil},
		{"the directory itself", models, "", ErrNotRegular, nil},
		{"fifo", "fifo.gguf", "", ErrNotRegular, nil},
		{"empty", "", "", nil, nil},
		{"etc passwd", "/etc/passwd", "", ErrOutsideModelDirs, nil},
	}
	for _, walk := range []bool{false, true} {
		for _, tc := range tests {
			name := tc.name
			if walk {
				// The fallback where openat2 is missing refuses every
				// symlink.
				name += " (walk)"
				if tc.walkErr != nil {
					tc.want, tc.err = "", tc.walkErr
				}
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f, err := openModel(dirs, tc.path, walk)
				if tc.want != "" {
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					b, err := io.ReadAll(f)
					if err != nil {
						t.Fatal(err)
					}
					if want := filepath.Join(root, tc.want); string(b) != want {
						t.Fatalf("opened %s, want %s", b, want)
					}
					// The descriptor's path reopens the same file.
					b, err = os.ReadFile(FDPath(f))
					if err != nil || string(b) != filepath.Join(root, tc.want) {
						t.Fatalf("through %s: %q, %v", FDPath(f), b, err)
					}
					return
				}
				if err == nil {
					f.Close()
					t.Fatalf("opened %s, want an error", f.Name())
				}
				if tc.err != nil && !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
			})
		}
	}
	if _, err := OpenModel(nil, "a.gguf"); !errors.Is(err, ErrOutsideModelDirs) {
		t.Fatalf("no dirs: %v", err)
	}
	// The operator's own paths: any file, but only a regular one, and a
	// FIFO is refused without blocking.
	for _, tc := range []struct {
		path string
		err  error
	}{
		{filepath.Join(other, "secret"), nil},
		{filepath.Join(models, "fifo.gguf"), ErrNotRegular},
		{models, ErrNotRegular},
		{filepath.Join(models, "nope"), fs.ErrNotExist},
	} {
		f, err := OpenRegular(tc.path)
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
			t.Errorf("OpenRegular(%s): %v, want %v", tc.path, err, tc.err)
		}
	}
}

// TestWalkNoFollow checks the fallback for kernels without openat2: it
// opens plain paths and refuses every symlink on the way.
func TestWalkNoFollow(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(root, "d", "e", "f"), []byte("x"), 0o644))
	must(os.Symlink("d", filepath.Join(root, "ld")))
	must(os.Symlink("f", filepath.Join(root, "d", "e", "lf")))
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(dfd)
	for _, tc := range []struct {
		rel string
		err error
	}{
		{"d/e/f", nil},
		{"./d/e/f", nil},
		{"ld/e/f", unix.ELOOP},
		{"d/e/lf", unix.ELOOP},
		{"d/e/nope", unix.ENOENT},
	} {
		fd, err := walkNoFollow(dfd, tc.rel)
		if err == nil {
			unix.Close(fd)
		}
		if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
			t.Errorf("%s: %v, want %v", tc.rel, err, tc.err)
		}
	}
}

// TestOpenModelRace swaps a directory inside the model directory for a
// symlink to a root-only one (and a file for a FIFO) while models are
// opened, as an admin-group member can: not one open may read the
// outside file or block. Checking a name and then opening it again lets a
// few of 5000 opens in this loop read the outside file, and many more of a
// daemon's loads, whose window between the two is longer.
func TestOpenModelRace(t *testing.T) {
	t.Parallel()
	for _, walk := range []bool{false, true} {
		t.Run(map[bool]string{false: "openat2", true: "walk"}[walk], func(t *testing.T) {
			t.Parallel()
			openModelRace(t, walk)
		})
	}
}

// openModelRace is TestOpenModelRace with openat2 or the fallback walk.
func openModelRace(t *testing.T, walk bool) {
	root := t.TempDir()
	models := filepath.Join(root, "models")
	secret := filepath.Join(root, "secret")
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{filepath.Join(models, "sub"), secret} {
		must(os.MkdirAll(d, 0o755))
	}
	must(os.WriteFile(filepath.Join(models, "sub", "m.gguf"), []byte("inside"), 0o644))
	must(os.WriteFile(filepath.Join(secret, "m.gguf"), []byte("SECRET"), 0o600))
	must(os.WriteFile(filepath.Join(models, "f.gguf"), []byte("inside"), 0o644))

	stop := pathrace.Swap(models, secret, 0)
	n := 5000
	if testing.Short() {
		n = 1000
	}
	var escapes, opened, refused int
	for i := range n {
		p := "sub/m.gguf"
		if i%2 == 1 {
			p = "f.gguf"
		}
		f, err := openModel([]string{models}, p, walk)
		if err != nil {
			refused++
			continue
		}
		b := make([]byte, 16)
		k, _ := f.ReadAt(b, 0)
		f.Close()
		opened++
		if string(b[:k]) != "inside" {
			escapes++
		}
	}
	must(stop())
	t.Logf("%d opens: %d read the model, %d refused (a symlink or a FIFO was in place), %d escapes", n, opened, refused, escapes)
	if escapes != 0 {
		t.Fatalf("%d of %d opens read a file outside the model directory", escapes, n)
	}
	if opened == 0 {
		t.Fatal("no open succeeded: the race test tested nothing")
	}
}

func TestAllow(t *testing.T) {
	t.Parallel()
	self := peer.Cred{PID: os.Getpid(), UID: os.Getuid(), GID: os.Getgid()}
	groups, err := peer.Groups("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	pol := Policy{AdminGID: 424242, ProcRoot: "/proc"}
	tests := []struct {
		name  string
		pol   Policy
		peer  Peer
		act   Action
		allow bool
	}{
		{"unix infer", pol, Peer{Unix: true, Cred: peer.Cred{PID: 1, UID: 1000, GID: 1000}}, Infer, true},
		{"tcp infer", pol, Peer{APIKey: true}, Infer, true},
		{"nobody infer", pol, Peer{}, Infer, false},
		{"tcp load", pol, Peer{APIKey: true}, Load, false},
		{"root load", pol, Peer{Unix: true, Cred: peer.Cred{PID: 1, UID: 0}}, Load, true},
		{"user load", pol, Peer{Unix: true, Cred: peer.Cred{PID: os.Getpid(), UID: 1000, GID: 1000}}, Load, false},
		{"primary gid", pol, Peer{Unix: true, Cred: peer.Cred{PID: 1, UID: 1000, GID: 424242}}, Unload, true},
		{"no admin group", Policy{AdminGID: -1}, Peer{Unix: true, Cred: peer.Cred{PID: 1, UID: 1000, GID: 5}}, BindDevice, false},
	}
	if len(groups) > 0 && os.Getuid() != 0 {
		tests = append(tests, struct {
			name  string
			pol   Policy
			peer  Peer
			act   Action
			allow bool
		}{"supplementary", Policy{AdminGID: groups[0], ProcRoot: "/proc"}, Peer{Unix: true, Cred: self}, WritePool, true})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.pol.Allow(tc.peer, tc.act)
			if tc.allow && err != nil {
				t.Fatal(err)
			}
			if !tc.allow && !errors.Is(err, ErrForbidden) {
				t.Fatalf("got %v, want ErrForbidden", err)
			}
		})
	}
}

func TestSupplementaryGroupFromProc(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "77"), 0o755); err != nil {
		t.Fatal(err)
	}
	status := "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t27 555 \n"
	if err := os.WriteFile(filepath.Join(dir, "77", "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := Peer{Unix: true, Cred: peer.Cred{PID: 77, UID: 1000, GID: 1000}}
	if err := (Policy{AdminGID: 555, ProcRoot: dir}).Allow(pr, Load); err != nil {
		t.Fatalf("member of 555: %v", err)
	}
	if err := (Policy{AdminGID: 556, ProcRoot: dir}).Allow(pr, Load); !errors.Is(err, ErrForbidden) {
		t.Fatalf("not a member: %v", err)
	}
	// A pid now owned by someone else must not lend its groups.
	pr.Cred.UID = 1001
	err := (Policy{AdminGID: 555, ProcRoot: dir}).Allow(pr, Load)
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "pid reused") {
		t.Fatalf("uid mismatch: %v", err)
	}
}
