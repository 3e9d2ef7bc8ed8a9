package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
)

// withTemplate writes a copy of the tiny model whose chat template is
// tmpl, padded with a Jinja comment to the length of the template it
// replaces, so that no other byte of the file moves.
func withTemplate(t *testing.T, dst, tmpl string) {
	t.Helper()
	b, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("tokenizer.chat_template")
	i := bytes.Index(b, key)
	if i < 0 {
		t.Fatal("the tiny model has no chat template")
	}
	at := i + len(key) + 4 // the value's type (u32), then its length (u64)
	n := int(binary.LittleEndian.Uint64(b[at:]))
	pad := n - len(tmpl) - len("{##}")
	if pad < 0 {
		t.Fatalf("template of %d bytes does not fit in %d", len(tmpl), n)
	}
	copy(b[at+8:], tmpl+"{#"+strings.Repeat(" ", pad)+"#}")
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A model whose chat template recurses without end, loops for ever or
// doubles a string until memory runs out is refused at load with the
// limit named; the daemon keeps serving its other model.
func TestHostileTemplateRefusedAtLoad(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	for _, tc := range []struct{ name, tmpl, limit string }{
		{"recurse", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"},
		{"range", "{% for i in range(10**12) %}x{% endfor %}", "loop"},
		{"double", "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", "memory"},
	} {
		path := filepath.Join(modelDir, "hostile-"+tc.name+".gguf")
		withTemplate(t, path, tc.tmpl)
		t.Cleanup(func() { os.Remove(path) })
		_, err := h.srv.LoadFile(context.Background(), path, api.LoadRequest{Name: "hostile-" + tc.name})
		if err == nil || !strings.Contains(err.Error(), tc.limit+" limit") {
			t.Errorf("%s: load: %v, want refused naming the %s limit", tc.name, err, tc.limit)
		}
		if code, b := h.post(t, "/v1/chat/completions", hello); code != 200 {
			t.Fatalf("after %s: %d %s", tc.name, code, b)
		}
	}
}
