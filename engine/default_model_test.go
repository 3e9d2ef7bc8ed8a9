package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/internal/synth"
)

// storiesCanonical is the start of stories260K's greedy continuation of
// "Once upon a time", as an independent float64 reference of the model
// gives it (../shared/models/README.md).
const storiesCanonical = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball."

// TestDefaultModelSpeaks: the embedded default model (stories260K, loaded
// from the file exactly as published, UINT32_MAX padding id included) gives
// its canonical English on the CPU backend greedily, and the loader's
// warning about the padding id reaches the log instead of refusing the
// file.
func TestDefaultModelSpeaks(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), synth.DefaultName)
	if err := synth.WriteDefault(path); err != nil {
		t.Fatal(err)
	}
	var logs logSink
	e, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: engine.BackendCPU, Links: defaultLinks(), Logger: logs.logger()})
	if err != nil {
		t.Fatalf("the default model does not load: %v", err)
	}
	defer e.Close()
	if !strings.Contains(logs.String(), "tokenizer.ggml.padding_token_id: token id 4294967295 out of range") {
		t.Errorf("no warning about the padding id in the log:\n%s", logs.String())
	}
	prompt := e.Tok.Encode("Once upon a time", true, false)
	_, toks := greedyLogits(t, e.Model, prompt, 40)
	got := "Once upon a time" + e.Tok.Decode(toks)
	if !strings.HasPrefix(got, storiesCanonical) {
		t.Errorf("greedy text %q\nwant it to start %q", got, storiesCanonical)
	}
}
