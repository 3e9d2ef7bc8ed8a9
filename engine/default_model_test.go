package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/engine"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/engine/prefab"
	"github.com/strata-llm/strata/engine/sample"
	"github.com/strata-llm/strata/internal/daemon/sched"
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

// TestDefaultModelOnGPU: on a GPU machine the default model (heads of 8,
// an FFN of 172) runs on the CUDA backend widened to the kernels' widths
// and gives the CPU's greedy tokens, its canonical text; without a GPU
// auto runs it on the CPU.
// Sequential: it opens GPU 0 where there is one.
func TestDefaultModelOnGPU(t *testing.T) {
	path := filepath.Join(t.TempDir(), synth.DefaultName)
	if err := synth.WriteDefault(path); err != nil {
		t.Fatal(err)
	}
	e, err := engine.OpenWith(context.Background(), path, engine.Options{Links: defaultLinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if bi := e.BackendInfo(); bi.Name != engine.BackendCUDA {
		t.Skipf("on the %s backend: %s", bi.Name, bi.Reason)
	}
	want, wantText := residentTokens(t, path, 40)
	got, text, err := greedy(t, e, 40)
	if err != nil {
		t.Fatal(err)
	}
	if !sameIDs(got, want) {
		t.Fatalf("GPU %q, CPU %q", text, wantText)
	}
	prompt := e.Tok.Encode("Once upon a time", true, false)
	res, err := sched.Generate(context.Background(), e.Backend(), e.Tok, sched.Request{Prompt: prompt, MaxTokens: 40, Sample: sample.Greedy()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := "Once upon a time" + res.Text; !strings.HasPrefix(got, storiesCanonical) {
		t.Fatalf("GPU greedy text %q\nwant it to start %q", got, storiesCanonical)
	}
}

// TestSplitModel: stories260K written as a 3-part split model
// (PREFIX-00001-of-00003.gguf, as gguf-split writes it) opens from its
// first part on the CPU backend, converts to a pool, and gives the same
// canonical text as the single file.
func TestSplitModel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	whole := filepath.Join(dir, synth.DefaultName)
	if err := synth.WriteDefault(whole); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Map(whole)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := gguf.WriteSplit(m, filepath.Join(dir, "stories"), 3)
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	src, err := gguf.Map(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(dir, "stories.pool")
	err = prefab.WritePool(src, pool, prefab.Options{})
	src.Close()
	if err != nil {
		t.Fatalf("prefab of the split model: %v", err)
	}
	for _, path := range []string{parts[0], pool} {
		e, err := engine.OpenWith(context.Background(), path, engine.Options{Backend: engine.BackendCPU, Links: defaultLinks()})
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		_, toks := greedyLogits(t, e.Model, e.Tok.Encode("Once upon a time", true, false), 40)
		if got := "Once upon a time" + e.Tok.Decode(toks); !strings.HasPrefix(got, storiesCanonical) {
			t.Errorf("%s: greedy text %q", filepath.Base(path), got)
		}
		e.Close()
	}
	if _, err := engine.Open(context.Background(), parts[1]); err == nil || !strings.Contains(err.Error(), "open its first part") {
		t.Errorf("opening part 2: %v, want an error naming the first part", err)
	}
}
