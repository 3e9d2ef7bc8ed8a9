package authz

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideModelDirs is returned (wrapped) when a model path does not
// resolve inside any configured model directory.
var ErrOutsideModelDirs = errors.New("model path outside the model directories")

// ResolveModelPath turns a client-supplied model path into the real path of
// a regular file inside one of dirs. A relative path is taken relative to
// each directory in turn; an absolute one must already lie inside one.
// Paths with a ".." element are refused before anything is resolved, and
// the fully resolved path (filepath.EvalSymlinks) must still lie inside the
// resolved directory, so a symlink cannot lead out of it.
func ResolveModelPath(dirs []string, p string) (string, error) {
	if p == "" {
		return "", errors.New("empty model path")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("model path contains a NUL byte")
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return "", fmt.Errorf("model path %q: %w (\"..\" is not allowed)", p, ErrOutsideModelDirs)
		}
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("model path %q: %w (none configured)", p, ErrOutsideModelDirs)
	}
	// Each directory both as written (absolute) and fully resolved.
	type dir struct{ abs, real string }
	var ds []dir
	for _, d := range dirs {
		ad, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		rd, err := filepath.EvalSymlinks(ad)
		if err != nil {
			continue // a missing directory holds no models
		}
		ds = append(ds, dir{ad, rd})
	}
	inAny := func(rp string) bool {
		for _, d := range ds {
			if within(rp, d.real) {
				return true
			}
		}
		return false
	}
	for _, d := range ds {
		cand := filepath.Clean(p)
		if !filepath.IsAbs(cand) {
			cand = filepath.Join(d.abs, cand)
		} else if !within(cand, d.abs) && !within(cand, d.real) {
			continue // an absolute path names its directory
		}
		rp, err := filepath.EvalSymlinks(cand)
		if errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(p) {
			continue // maybe in a later directory
		}
		if err != nil {
			return "", fmt.Errorf("model %q: %w", p, err)
		}
		if !inAny(rp) {
			return "", fmt.Errorf("model path %q resolves to %s: %w", p, rp, ErrOutsideModelDirs)
		}
		st, err := os.Stat(rp)
		if err != nil {
			return "", fmt.Errorf("model %q: %w", p, err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("model %q is not a regular file", p)
		}
		return rp, nil
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("model %q: not found in the model directories: %w", p, fs.ErrNotExist)
	}
	return "", fmt.Errorf("model path %q: %w", p, ErrOutsideModelDirs)
}

// within reports whether p is dir or lies below it (both cleaned, absolute).
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(p, dir)
}
