package authz

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOutsideModelDirs is returned (wrapped) when a model path does not
// resolve inside any configured model directory.
var ErrOutsideModelDirs = errors.New("model path outside the model directories")

// ErrNotRegular is returned (wrapped) when a model path names something
// other than a regular file (a directory, a FIFO, a device).
var ErrNotRegular = errors.New("not a regular file")

// OpenModel opens a client-supplied model path once, beneath one of dirs,
// and returns the open regular file; everything the daemon does with the
// model afterwards goes through this descriptor (FDPath), never the name
// again. Checking a name and then opening it (or opening it again later)
// lets whoever can write inside a model directory swap a directory for a
// symlink between the two and have root read any file.
//
// A relative path is looked up beneath each directory in turn; an absolute
// one must lie inside one (as written or with the directory's own symlinks
// resolved). Paths with a ".." element are refused before anything is
// opened. The lookup is one openat2 with RESOLVE_BENEATH: symlinks inside
// the directory are followed only while they stay beneath it (absolute
// symlinks and any escape are refused, with ErrOutsideModelDirs); where
// openat2 is missing, a walk with O_NOFOLLOW refuses symlinks altogether.
// The final element is opened with O_PATH and must be a regular file
// (ErrNotRegular) before it is reopened for reading through /proc/self/fd,
// so a FIFO or a device is never opened and a load never blocks. The
// returned file's Name is the path within its directory, for messages.
func OpenModel(dirs []string, p string) (*os.File, error) {
	return openModel(dirs, p, false)
}

// openModel is OpenModel; walk forces the O_NOFOLLOW walk (tests of the
// fallback on kernels that have openat2).
func openModel(dirs []string, p string, walk bool) (*os.File, error) {
	if p == "" {
		return nil, errors.New("empty model path")
	}
	if strings.ContainsRune(p, 0) {
		return nil, errors.New("model path contains a NUL byte")
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return nil, fmt.Errorf("model path %q: %w (\"..\" is not allowed)", p, ErrOutsideModelDirs)
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("model path %q: %w (none configured)", p, ErrOutsideModelDirs)
	}
	for _, d := range dirs {
		ad, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		rel := filepath.Clean(p)
		if filepath.IsAbs(rel) {
			r, ok := relTo(rel, ad)
			if !ok {
				rd, err := filepath.EvalSymlinks(ad)
				if err != nil {
					continue
				}
				if r, ok = relTo(rel, rd); !ok {
					continue // an absolute path names its directory
				}
			}
			rel = r
		}
		// The configured directory itself is the operator's choice, so
		// its own path may hold symlinks; only what lies beneath it is
		// the client's.
		dfd, err := unix.Open(ad, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // a missing directory holds no models
		}
		f, err := openBeneath(dfd, ad, rel, walk)
		unix.Close(dfd)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(p):
			continue // maybe in a later directory
		case err != nil:
			return nil, fmt.Errorf("model %q: %w", p, err)
		}
		return f, nil
	}
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("model %q: not found in the model directories: %w", p, fs.ErrNotExist)
	}
	return nil, fmt.Errorf("model path %q: %w", p, ErrOutsideModelDirs)
}

// FDPath names f's open file for code that takes a path: opening it opens
// the same file again (the inode f has open), whatever has happened to its
// name since. It is valid while f is open.
func FDPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// OpenRegular opens path (the operator's own, not a client's: it is not
// confined to a directory) for reading as OpenModel does: with O_PATH
// first, so that only a regular file is ever opened for reading, and once.
func OpenRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return reopenRegular(fd, path)
}

// openBeneath opens rel beneath the directory dfd (named dir, for
// messages) as OpenModel describes.
func openBeneath(dfd int, dir, rel string, walk bool) (*os.File, error) {
	name := filepath.Join(dir, rel)
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := -1, error(unix.ENOSYS)
	if !walk {
		fd, err = openat2(dfd, rel, &how)
	}
	switch {
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) && !openat2Works():
		fd, err = walkNoFollow(dfd, rel)
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w (a symlink; this kernel has no openat2, so symlinks are not followed)", name, ErrOutsideModelDirs)
		}
	case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s: %w (a symlink leads out of the directory, or is absolute)", name, ErrOutsideModelDirs)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return reopenRegular(fd, name)
}

// openat2 retries on EINTR and EAGAIN (which RESOLVE flags return when a
// rename raced the lookup): the caller wants an answer, not a retry.
func openat2(dfd int, rel string, how *unix.OpenHow) (int, error) {
	for range 100 {
		fd, err := unix.Openat2(dfd, rel, how)
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// openat2Works tells a seccomp filter's EPERM for openat2 from a real
// permission error: the current directory opens whenever openat2 exists.
func openat2Works() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err == nil {
		unix.Close(fd)
		return true
	}
	return false
}

// walkNoFollow opens rel beneath dfd one element at a time with
// O_NOFOLLOW: the fallback for kernels without openat2. rel holds no ".."
// (OpenModel refuses it) and any symlink on the way fails with ELOOP or
// ENOTDIR.
func walkNoFollow(dfd int, rel string) (int, error) {
	els := strings.Split(filepath.ToSlash(rel), "/")
	cur, err := unix.Openat(dfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for i, el := range els {
		if el == "" || el == "." {
			continue
		}
		flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(els)-1 {
			flags |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(cur, el, flags, 0)
		unix.Close(cur)
		if errors.Is(err, unix.ENOTDIR) {
			// An intermediate symlink (O_NOFOLLOW|O_DIRECTORY on a link)
			// or a file where a directory should be.
			var st unix.Stat_t
			if unix.Fstatat(dfd, filepath.Join(els[:i+1]...), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, unix.ELOOP
			}
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	// An O_PATH|O_NOFOLLOW open of a symlink opens the link itself.
	var st unix.Stat_t
	if err := unix.Fstat(cur, &st); err != nil {
		unix.Close(cur)
		return -1, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(cur)
		return -1, unix.ELOOP
	}
	return cur, nil
}

// reopenRegular takes an O_PATH descriptor, checks that it is a regular
// file and reopens that same inode for reading through /proc/self/fd
// (closing the O_PATH one). Opening only after the check is what keeps a
// FIFO from blocking the load and a device node from being opened at all.
func reopenRegular(pfd int, name string) (*os.File, error) {
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w", name, ErrNotRegular)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "reopen", Path: name, Err: err}
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: reopening through /proc/self/fd gave another file", name)
	}
	// Back to blocking reads: it is a regular file, where O_NONBLOCK means
	// nothing, but os.File should not treat it as pollable.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// relTo returns p relative to dir when p is dir or lies below it (both
// cleaned, absolute).
func relTo(p, dir string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	if !strings.HasPrefix(p, dir) {
		return "", false
	}
	return p[len(dir):], true
}
