package openai

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

func seedCorpus(f *testing.F) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","prompt":[[1,2,3]],"logprobs":3}`))
	f.Add([]byte("\xff\xfe"))
}

// checkDecoded asserts the invariants every accepted request satisfies and
// that every rejection is a 400 *Error.
func checkDecoded(t *testing.T, p *Params, err error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Type != TypeInvalidRequest || e.Message == "" {
			t.Fatalf("rejection is not a well-formed 400: %#v", err)
		}
		return
	}
	if p.Model == "" || p.MaxTokens < 0 || p.Temperature < 0 || p.Temperature > 2 || p.TopP < 0 || p.TopP > 1 ||
		len(p.Stop) > MaxStop || p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs {
		t.Fatalf("accepted out-of-range params: %+v", p)
	}
	if p.IncludeUsage && !p.Stream {
		t.Fatalf("include_usage without stream")
	}
	for _, s := range p.Stop {
		if s == "" || !utf8.ValidString(s) {
			t.Fatalf("bad stop %q", s)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to both request decoders: they
// must never panic, must reject with a 400 OpenAI error, and must only
// accept parameters inside their documented ranges.
func FuzzDecodeRequest(f *testing.F) {
	seedCorpus(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeChat(body)
		if err == nil {
			checkDecoded(t, &c.Params, nil)
			if len(c.Messages) == 0 {
				t.Fatal("accepted a chat without messages")
			}
			for _, m := range c.Messages {
				if m.Role != "system" && m.Role != "user" && m.Role != "assistant" {
					t.Fatalf("accepted role %q", m.Role)
				}
				if !utf8.ValidString(m.Content) {
					t.Fatal("accepted invalid UTF-8 content")
				}
			}
		} else {
			checkDecoded(t, nil, err)
		}
		tc, err := DecodeCompletion(body)
		if err == nil {
			checkDecoded(t, &tc.Params, nil)
			if tc.Prompt.Tokens != nil && len(tc.Prompt.Tokens) == 0 {
				t.Fatal("accepted an empty token prompt")
			}
		} else {
			checkDecoded(t, nil, err)
		}
	})
}
