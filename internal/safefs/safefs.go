//go:build linux

// Package safefs creates and opens strata's own files (caches, temporary
// files, written models and reports) so that another local user cannot
// redirect them. A privileged process that writes a predictable name in a
// directory someone else can write, or follows a symlink planted there,
// can be made to overwrite any file; one that loads a cached model from
// such a directory can be made to serve someone else's.
package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is returned (wrapped) when a directory or file is not safe to
// use: a symlink on its path, owned by another user, or writable by others.
var ErrUnsafe = errors.New("unsafe path")

// PrivateDir makes dir (created with mode 0700 where missing, with any
// missing parents) a directory only this user can use and checks every
// step of its path: no element may be a symlink, every ancestor must be
// owned by root or this user and, when others may write it, be sticky
// (like /tmp, where others cannot rename or remove what is not theirs); dir
// itself must be owned by this user and not writable by anyone else. A
// dir of ours that others may only read is narrowed to 0700. Anything
// else is an error wrapping ErrUnsafe that names the element, never
// repaired: its contents could already have been planted.
func PrivateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("private dir %s: %w", dir, err)
	}
	euid := uint32(os.Geteuid())
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("private dir %s: %w", abs, err)
	}
	els := strings.Split(strings.Trim(abs, "/"), "/")
	at := "/"
	for i, el := range els {
		if el == "" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fmt.Errorf("private dir %s: stat %s: %w", abs, at, err)
		}
		if st.Uid != 0 && st.Uid != euid {
			unix.Close(fd)
			return fmt.Errorf("private dir %s: %s is owned by uid %d: %w", abs, at, st.Uid, ErrUnsafe)
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			unix.Close(fd)
			return fmt.Errorf("private dir %s: %s is writable by others and not sticky: %w", abs, at, ErrUnsafe)
		}
		last := i == len(els)-1
		if err := unix.Mkdirat(fd, el, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return fmt.Errorf("private dir %s: creating %s: %w", abs, filepath.Join(at, el), err)
		}
		flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(fd, el, flags, 0)
		unix.Close(fd)
		at = filepath.Join(at, el)
		switch {
		case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
			return fmt.Errorf("private dir %s: %s is a symlink or not a directory: %w", abs, at, ErrUnsafe)
		case err != nil:
			return fmt.Errorf("private dir %s: opening %s: %w", abs, at, err)
		}
		fd = next
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("private dir %s: %w", abs, err)
	}
	switch {
	case st.Uid != euid:
		return fmt.Errorf("private dir %s: owned by uid %d, not %d: %w", abs, st.Uid, euid, ErrUnsafe)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("private dir %s: mode %04o lets others write it: %w", abs, st.Mode&0o7777, ErrUnsafe)
	case st.Mode&0o077 != 0:
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("private dir %s: narrowing mode %04o to 0700: %w", abs, st.Mode&0o7777, err)
		}
	}
	return nil
}

// resolveExisting resolves the symlinks of the longest prefix of p that
// exists, keeping the rest as written.
func resolveExisting(p string) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// CacheDir returns strata's cache directory (with sub appended), made
// private with PrivateDir: systemd's $CACHE_DIRECTORY for a unit with
// CacheDirectory=, else the user's cache directory (os.UserCacheDir), else
// /var/cache/strata for root and strata-UID in the temporary directory for
// others. It never shares one directory between users, so a daemon
// without HOME does not take a directory another user made.
func CacheDir(sub string) (string, error) {
	dir := CacheDirPath(sub)
	if err := PrivateDir(dir); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	return dir, nil
}

// CacheDirPath is the directory CacheDir returns, without creating or
// checking it (for a flag's default value; make it private with
// PrivateDir before use).
func CacheDirPath(sub string) string {
	return filepath.Join(cacheDirFor(os.Getenv, os.Geteuid()), sub)
}

// cacheDirFor is CacheDir's choice of directory for the environment getenv
// reads and the effective uid euid.
func cacheDirFor(getenv func(string) string, euid int) string {
	if d, _, _ := strings.Cut(getenv("CACHE_DIRECTORY"), ":"); filepath.IsAbs(d) {
		// systemd may list several, colon-separated; the first is ours.
		return d
	}
	// os.UserCacheDir's rule, over getenv.
	if d := getenv("XDG_CACHE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "strata")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".cache", "strata")
	}
	if euid == 0 {
		return "/var/cache/strata"
	}
	tmp := getenv("TMPDIR")
	if !filepath.IsAbs(tmp) {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "strata-"+strconv.Itoa(euid))
}

// CreateTemp creates a new, empty temporary file beside path (a random
// name in path's directory, O_CREATE|O_EXCL, so never an existing file or
// a symlink's target) with mode perm, for writing path atomically: write
// it, then Commit. Writing path+".tmp" with O_TRUNC instead follows a
// symlink planted under that name.
func CreateTemp(path string, perm fs.FileMode) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// Commit closes f, a file from CreateTemp, and renames it to path (the
// rename replaces a symlink at path, never its target). On any error the
// temporary file is removed.
func Commit(f *os.File, path string) error {
	err := f.Close()
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// WriteFile writes data to path atomically through CreateTemp and Commit.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := CreateTemp(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	return Commit(f, path)
}

// CheckOwned checks that path is a regular file (not a symlink: it is not
// followed), owned by this user and writable by no one else: what a cache
// entry must be before it is loaded.
func CheckOwned(path string) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%s is a symlink: %w", path, ErrUnsafe)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file: %w", path, ErrUnsafe)
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s is owned by uid %d: %w", path, st.Uid, ErrUnsafe)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %04o, writable by others: %w", path, st.Mode&0o7777, ErrUnsafe)
	}
	return nil
}
