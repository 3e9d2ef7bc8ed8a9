package synth

import (
	"bytes"
	_ "embed" // the default model's bytes
	"fmt"
	"os"
	"path/filepath"
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

// DefaultPath returns the default model's file in the user's cache directory
// (os.UserCacheDir()/strata, or the temporary directory when there is none),
// writing it there when it is missing or differs from the embedded bytes.
// created reports whether this call wrote it. `strata run` and
// `stratad --default-model` use it: the engine opens models by path (mapped,
// streamed from the pool, or loaded on the GPU), so the bytes go to a file.
func DefaultPath() (path string, created bool, err error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "strata")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("creating cache dir: %w", err)
	}
	p := filepath.Join(dir, DefaultName)
	if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, defaultGGUF) {
		return p, false, nil
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
