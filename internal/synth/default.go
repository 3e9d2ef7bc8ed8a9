package synth

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/strata-llm/strata/internal/safefs"
)

// Default is strata's default model: a tiny synthetic Llama. Its weights
// are random, so its text is noise; it exists so that the whole path
// (tokenizer, forward pass, sampling, streaming, the daemon's API) runs on
// a fresh machine with nothing to download. `strata run` and
// `stratad --default-model` use the same file.
var Default = Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}

// DefaultPath returns the cached file of the Default model, writing it on
// first use into strata's private cache directory (safefs.CacheDir: the
// user's own, never one shared with other users, checked for owner, mode
// and symlinks). A cached file is used only if it is a regular file of
// ours that no one else may write; anything else there is an error, not
// something to load. created reports whether it was written by this call.
func DefaultPath() (path string, created bool, err error) {
	dir, err := safefs.CacheDir("")
	if err != nil {
		return "", false, err
	}
	o := Default
	p := filepath.Join(dir, fmt.Sprintf("synth-%s-%s-%s-seed%d.gguf", o.Arch, o.Shape, o.Type, o.Seed))
	switch err := safefs.CheckOwned(p); {
	case err == nil:
		return p, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("default model: %w", err)
	}
	if err := Write(p, o); err != nil {
		return "", false, fmt.Errorf("synthesizing default model: %w", err)
	}
	return p, true, nil
}
