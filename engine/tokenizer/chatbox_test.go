package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostileTok is a vocabulary whose chat template is tmpl, rendered within lim.
func hostileTok(t *testing.T, tmpl string, lim ChatLimits) *Tokenizer {
	t.Helper()
	v := &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>"}, Types: []int32{2, 3, 3},
		BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, ChatTemplate: tmpl}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	tok.chatLimits = &lim
	return tok
}

// Templates that, rendered in the daemon's own process, killed it (a
// blown stack, an exhausted heap) or held a core for good are refused
// with the limit they broke, and the next render works.
func TestChatTemplateLimits(t *testing.T) {
	t.Parallel()
	lim := ChatLimits{Time: time.Second, Memory: 64 << 20, Stack: 2 << 20, Output: 4096, Range: 10_000}
	const hello = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
	for _, tc := range []struct {
		name, tmpl, limit string
	}{
		{"recursive macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion"},
		{"huge range", "{% for i in range(1000000000) %}x{% endfor %}", "loop"},
		{"huge negative range", "{% for i in range(0, -1000000000000, -1) %}x{% endfor %}", "loop"},
		{"string doubled 40 times", "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}" +
			"{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}", "memory"},
		{"nested loops", "{% for i in range(10000) %}{% for j in range(10000) %}{% for k in range(10000) %}" +
			"{% endfor %}{% endfor %}{% endfor %}", "time"},
		{"big output", "{% for i in range(1000) %}0123456789{% endfor %}", "output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := hostileTok(t, tc.tmpl, lim)
			start := time.Now()
			_, err := tok.RenderChat([]Message{{Role: "user", Content: "Hi"}}, ChatOptions{AddGenerationPrompt: true})
			// On a slow machine (the race detector on busy cores) the
			// doubling can meet the time limit before the memory limit,
			// in the render as in the probe: either refusal is right.
			refused := func(le *LimitError) bool {
				return le.Limit == tc.limit || tc.limit == "memory" && le.Limit == "time"
			}
			var le *LimitError
			if !errors.As(err, &le) || !refused(le) {
				t.Fatalf("err = %v, want the %s limit", err, tc.limit)
			}
			if !strings.Contains(err.Error(), le.Limit+" limit") {
				t.Errorf("message %q does not name the %s limit", err, le.Limit)
			}
			if took := time.Since(start); took > lim.Time+3*time.Second {
				t.Errorf("refusal took %v", took)
			}
			if err := tok.ProbeChatTemplate(); !errors.As(err, &le) || !refused(le) || !strings.Contains(err.Error(), le.Limit+" limit") {
				t.Errorf("probe: %v, want the %s limit named", err, tc.limit)
			}
			// The pool replaced the dead worker: a sane template renders.
			good := hostileTok(t, hello, lim)
			out, err := good.RenderChat([]Message{{Role: "user", Content: "Hi"}}, ChatOptions{})
			if err != nil || out != "user: Hi\n" {
				t.Errorf("after the refusal: %q, %v", out, err)
			}
		})
	}
}

// Real templates pass the probe at the default limits, and a range within
// the limit still renders (the bounded range is Python's).
func TestChatTemplateProbeAccepts(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "templates", "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v, %v", files, err)
	}
	for _, f := range files {
		tmpl, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := hostileTok(t, string(tmpl), DefaultChatLimits).ProbeChatTemplate(); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
	tok := hostileTok(t, "{{ range(3) | join(',') }};{{ range(1, 7, 2) | join(',') }};{{ range(5, 0, -2) | join(',') }};{{ range(2, 2) | length }}", DefaultChatLimits)
	out, err := tok.RenderChat([]Message{{Role: "user", Content: "x"}}, ChatOptions{})
	if want := "0,1,2;1,3,5;5,3,1;0"; err != nil || out != want {
		t.Errorf("ranges = %q, %v, want %q", out, err, want)
	}
}

// A worker serves many renders: the bound on one reply's size applies to
// each reply, not to all a worker ever sends, so a long-lived worker does
// not fail once its replies add up past the output limit.
func TestChatTemplateWorkerOutputPerReply(t *testing.T) {
	t.Parallel()
	lim := ChatLimits{Time: 5 * time.Second, Memory: 64 << 20, Stack: 1 << 20, Output: 1024, Range: 1000}
	tok := hostileTok(t, "{% for i in range(100) %}0123456789{% endfor %}", lim)
	for i := range 100 { // 100 KB of replies, past 6 x 1 KiB + 4 KiB
		out, err := tok.RenderChat([]Message{{Role: "user", Content: "x"}}, ChatOptions{})
		if err != nil || len(out) != 1000 {
			t.Fatalf("render %d: %d bytes, %v", i, len(out), err)
		}
	}
}

// A template error that carries a huge value (here the template's own
// string) is an error of bounded length, not a worker that dies.
func TestChatTemplateHugeError(t *testing.T) {
	t.Parallel()
	lim := ChatLimits{Time: 5 * time.Second, Memory: 64 << 20, Stack: 1 << 20, Output: 1024, Range: 1000}
	for _, tmpl := range []string{
		"{% set ns = namespace(s='x') %}{% for i in range(17) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ raise_exception(ns.s) }}",
		"{% set ns = namespace(s='<') %}{% for i in range(17) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s.nosuchmethod() }}",
	} {
		_, err := hostileTok(t, tmpl, lim).RenderChat([]Message{{Role: "user", Content: "x"}}, ChatOptions{})
		if err == nil || errors.Is(err, errWorker) || len(err.Error()) > 8<<10 {
			t.Errorf("%.60s: err = %.200v (%d bytes), want a bounded template error", tmpl, err, len(fmt.Sprint(err)))
		}
	}
}
