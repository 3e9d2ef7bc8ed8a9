package synth

import (
	"bytes"
	_ "embed" // the default model's bytes
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-llm/strata/internal/safefs"
)

// defaultGGUF is strata's default model: Andrej Karpathy's stories260K from
// llama2.c's tinyllamas (MIT; see NOTICE), a 260K-parameter Llama trained on
// TinyStories, converted to GGUF by llama.cpp. At 1.2 MB it fits in the
// binaries, so a fresh machine with nothing downloaded runs a real trained
// model end to end and its first reply is English ("Once upon a time, there
// was a little girl named Lily. …") rather than the noise of random weights.
// The file is kept exactly as published, quirks included (its padding and
// separator ids are UINT32_MAX, which the loader ignores with a warning).
//
//go:embed stories260K.gguf
var defaultGGUF []byte

// DefaultName is the file name of the default model, and so the name the
// daemon lists it under.
const DefaultName = "stories260K.gguf"

// DefaultGGUF returns a copy of the default model's GGUF bytes.
func DefaultGGUF() []byte { return bytes.Clone(defaultGGUF) }

// DefaultPath returns the default model's file in strata's private cache
// directory (safefs.CacheDir: the user's own, never one shared with other
// users, checked for owner, mode and symlinks), writing it there when it is
// missing or differs from the embedded bytes. A file found there is read
// only if it is a regular file of ours that no one else may write; anything
// else is an error, not something to load or replace. created reports
// whether this call wrote it. `strata run` and `stratad --default-model`
// use it: the engine opens models by path (mapped, streamed from the pool,
// or loaded on the GPU), so the bytes go to a file.
func DefaultPath() (path string, created bool, err error) {
	dir, err := safefs.CacheDir("")
	if err != nil {
		return "", false, err
	}
	p := filepath.Join(dir, DefaultName)
	switch err := safefs.CheckOwned(p); {
	case err == nil:
		if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, defaultGGUF) {
			return p, false, nil
		}
		// Ours, but not the default's bytes (an older or cut-short copy):
		// written afresh below.
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("default model: %w", err)
	}
	if err := WriteDefault(p); err != nil {
		return "", false, err
	}
	return p, true, nil
}

// WriteDefault writes the default model to path, through a temporary file in
// the same directory renamed over it, so a reader never sees half a model.
func WriteDefault(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".default-*.gguf")
	if err != nil {
		return fmt.Errorf("writing the default model: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(defaultGGUF)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the default model to %s: %w", path, err)
	}
	return nil
}
