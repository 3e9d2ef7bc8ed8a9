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
// limit named; the daemon keeps serving its other model. The doubling
// copies ever larger strings: on a slow machine (the race detector on two
// busy cores) the time limit can stop it before the memory limit does,
// and either refusal is right.
func TestHostileTemplateRefusedAtLoad(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	for _, tc := range []struct {
		name, tmpl string
		limits     []string
	}{
		{"recurse", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", []string{"recursion"}},
		{"range", "{% for i in range(10**12) %}x{% endfor %}", []string{"loop"}},
		{"double", "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", []string{"memory", "time"}},
	} {
		path := filepath.Join(modelDir, "hostile-"+tc.name+".gguf")
		withTemplate(t, path, tc.tmpl)
		t.Cleanup(func() { os.Remove(path) })
		_, err := h.srv.LoadFile(context.Background(), path, api.LoadRequest{Name: "hostile-" + tc.name})
		named := false
		for _, l := range tc.limits {
			named = named || err != nil && strings.Contains(err.Error(), l+" limit")
		}
		if !named {
			t.Errorf("%s: load: %v, want refused naming the %s limit", tc.name, err, strings.Join(tc.limits, " or "))
		}
		if code, b := h.post(t, "/v1/chat/completions", hello); code != 200 {
			t.Fatalf("after %s: %d %s", tc.name, code, b)
		}
	}
}

// A template that passes the load's probe but recurses on a longer
// conversation than the probe's fails that request with a 400 naming the
// limit; the daemon and the model keep serving everyone else. (Contents
// reach the template as placeholders, see EncodeChat, so the shape of the
// conversation is what a hostile template can key on.)
func TestTemplateLimitAtRequest(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	path := filepath.Join(modelDir, "hostile-late.gguf")
	withTemplate(t, path, "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{% for m in messages %}"+
		"{{ m.role }}: {{ m.content }}\n{% endfor %}{% if messages|length > 7 %}{{ f(0) }}{% endif %}")
	t.Cleanup(func() { os.Remove(path) })
	if _, err := h.srv.LoadFile(context.Background(), path, api.LoadRequest{Name: "late"}); err != nil {
		t.Fatalf("load: %v", err)
	}
	ask := func(turns int) (int, string) {
		msgs := strings.Repeat(`{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},`, turns/2) + `{"role":"user","content":"x"}`
		return h.postStr(t, `{"model":"late","messages":[`+msgs+`],"max_tokens":2}`)
	}
	if code, b := ask(8); code != 400 || !strings.Contains(b, "recursion limit") {
		t.Fatalf("9 messages: %d %s", code, b)
	}
	if code, b := ask(2); code != 200 {
		t.Fatalf("after the refusal: %d %s", code, b)
	}
}

func (h *harness) postStr(t *testing.T, body string) (int, string) {
	code, b := h.post(t, "/v1/chat/completions", body)
	return code, string(b)
}
