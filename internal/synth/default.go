package synth

import (
	"fmt"
	"os"
	"path/filepath"
)

// Default is strata's default model: a tiny synthetic Llama. Its weights
// are random, so its text is noise; it exists so that the whole path
// (tokenizer, forward pass, sampling, streaming, the daemon's API) runs on
// a fresh machine with nothing to download. `strata run` and
// `stratad --default-model` use the same file.
var Default = Options{Arch: "llama", Shape: "tiny", Type: "q8_0", Seed: 1}

// DefaultPath returns the cached file of the Default model, writing it on
// first use into the user's cache directory (os.UserCacheDir()/strata, or
// the temporary directory when there is none). created reports whether it
// was written by this call.
func DefaultPath() (path string, created bool, err error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "strata")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("creating cache dir: %w", err)
	}
	o := Default
	p := filepath.Join(dir, fmt.Sprintf("synth-%s-%s-%s-seed%d.gguf", o.Arch, o.Shape, o.Type, o.Seed))
	if _, err := os.Stat(p); err == nil {
		return p, false, nil
	}
	if err := Write(p, o); err != nil {
		return "", false, fmt.Errorf("synthesizing default model: %w", err)
	}
	return p, true, nil
}
