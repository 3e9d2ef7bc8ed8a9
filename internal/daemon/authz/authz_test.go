package authz

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/internal/daemon/peer"
)

func TestResolveModelPath(t *testing.T) {
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
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
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
	must(os.Symlink(filepath.Join(models, "a.gguf"), filepath.Join(models, "alias.gguf")))

	dirs := []string{models}
	tests := []struct {
		name, path string
		want       string // resolved path relative to root; "" when an error is wanted
		err        error
	}{
		{"relative", "a.gguf", "models/a.gguf", nil},
		{"absolute", filepath.Join(models, "a.gguf"), "models/a.gguf", nil},
		{"subdir", "sub/b.gguf", "models/sub/b.gguf", nil},
		{"inner symlink", "alias.gguf", "models/a.gguf", nil},
		{"dotdot", "../other/secret", "", ErrOutsideModelDirs},
		{"dotdot inside", "sub/../a.gguf", "", ErrOutsideModelDirs},
		{"absolute outside", filepath.Join(other, "secret"), "", ErrOutsideModelDirs},
		{"symlink escape", "escape.gguf", "", ErrOutsideModelDirs},
		{"dir symlink escape", "escdir/secret", "", ErrOutsideModelDirs},
		{"missing", "nope.gguf", "", fs.ErrNotExist},
		{"directory", "sub", "", nil},
		{"empty", "", "", nil},
		{"etc passwd", "/etc/passwd", "", ErrOutsideModelDirs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveModelPath(dirs, tc.path)
			if tc.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				if want := filepath.Join(root, tc.want); got != want {
					t.Fatalf("got %s want %s", got, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("resolved to %s, want an error", got)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
		})
	}
	if _, err := ResolveModelPath(nil, "a.gguf"); !errors.Is(err, ErrOutsideModelDirs) {
		t.Fatalf("no dirs: %v", err)
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
