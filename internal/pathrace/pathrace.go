// Package pathrace is the adversary of the path-resolution race tests: it
// swaps a model directory's entries, by atomic renames and as fast as it
// can, for ones that lead outside it or would block an open.
package pathrace

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Swap starts turning, in models, the directory "sub" into a symlink to
// secret and back, and the file "f.gguf" into a FIFO and back, pausing
// pause (0: none) after each round. stop ends it and returns what failed
// setting it up.
func Swap(models, secret string, pause time.Duration) (stop func() error) {
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		sub, real, link := filepath.Join(models, "sub"), filepath.Join(models, "sub.real"), filepath.Join(models, "sub.link")
		f, fr, ff := filepath.Join(models, "f.gguf"), filepath.Join(models, "f.real"), filepath.Join(models, "f.fifo")
		if err := os.Symlink(secret, link); err != nil {
			done <- err
			return
		}
		if err := unix.Mkfifo(ff, 0o644); err != nil {
			done <- err
			return
		}
		for {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			// sub: directory -> symlink to secret; f.gguf: file -> FIFO.
			_ = os.Rename(sub, real)
			_ = os.Rename(link, sub)
			_ = os.Rename(f, fr)
			_ = os.Rename(ff, f)
			// And back.
			_ = os.Rename(sub, link)
			_ = os.Rename(real, sub)
			_ = os.Rename(f, ff)
			_ = os.Rename(fr, f)
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}()
	return func() error {
		close(quit)
		return <-done
	}
}
