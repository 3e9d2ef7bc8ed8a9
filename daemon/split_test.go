package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/gguf"
	"github.com/strata-llm/strata/internal/synth"
)

// TestLoadSplitModel: a split model loads from its first part and is
// named as its single file would be ("stories", not
// "stories-00001-of-00002").
func TestLoadSplitModel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	parts := splitStories(t, dir, dir)
	srv, err := New(Config{ModelDirs: []string{dir}, Log: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := srv.LoadFile(context.Background(), parts[0], api.LoadRequest{Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "stories" || st.Layers != 5 {
		t.Errorf("loaded as %q with %d layers, want \"stories\" with 5", st.Name, st.Layers)
	}
}

// splitStories writes stories260K whole into scratch and split in two
// parts into dir (dir/stories-0000N-of-00002.gguf), and returns the parts.
func splitStories(t *testing.T, scratch, dir string) []string {
	t.Helper()
	whole := filepath.Join(scratch, "whole.gguf")
	if err := synth.WriteDefault(whole); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Map(whole)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := gguf.WriteSplit(m, filepath.Join(dir, "stories"), 2)
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	return parts
}
