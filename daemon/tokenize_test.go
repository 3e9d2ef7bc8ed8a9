package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
)

// TestTokenizeDetokenize: llama-server's /tokenize and /detokenize over
// the loaded model's tokenizer, the model named or the only one; ids
// outside the vocabulary and unknown models are refused.
func TestTokenizeDetokenize(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	lm, err := h.srv.lookup(tiny)
	if err != nil {
		t.Fatal(err)
	}
	const text = "tokens, then text again"
	want := lm.eng.Tok.Encode(text, false, false)
	code, b := h.post(t, PathTokenize, `{"content":"`+text+`"}`)
	var tr struct {
		Tokens []int32 `json:"tokens"`
	}
	if code != 200 || json.Unmarshal(b, &tr) != nil || !slices.Equal(tr.Tokens, want) {
		t.Fatalf("tokenize: %d %s, want %v", code, b, want)
	}
	code, b = h.post(t, PathTokenize, `{"model":"tiny","content":"`+text+`","add_special":true,"with_pieces":true}`)
	var pr struct {
		Tokens []TokenPiece `json:"tokens"`
	}
	if code != 200 || json.Unmarshal(b, &pr) != nil || len(pr.Tokens) != len(want)+1 || pr.Tokens[1].ID != want[0] {
		t.Fatalf("tokenize with BOS and pieces: %d %s", code, b)
	}
	ids, _ := json.Marshal(want)
	code, b = h.post(t, PathDetokenize, `{"tokens":`+string(ids)+`}`)
	var dr DetokenizeResponse
	if code != 200 || json.Unmarshal(b, &dr) != nil || dr.Content != text {
		t.Fatalf("detokenize: %d %s", code, b)
	}
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{PathDetokenize, `{"tokens":[-1]}`, 400},
		{PathDetokenize, `{"tokens":[99999999]}`, 400},
		{PathTokenize, `{"model":"nope","content":"x"}`, 404},
		{PathTokenize, `{"content":"x","extra":1}`, 400},
	} {
		if code, b := h.post(t, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s: %d %s, want %d", tc.path, tc.body, code, b, tc.want)
		}
	}
}

// TestHealth: public on TCP (no key), 200 with a model ready, 503 with
// none.
func TestHealth(t *testing.T) {
	t.Parallel()
	h := start(t, opts{tcp: true})
	get := func() (int, api.Health) {
		t.Helper()
		resp, err := http.Get(h.tcp + api.PathHealth)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var hl api.Health
		if err := json.Unmarshal(b, &hl); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, hl
	}
	if code, hl := get(); code != 200 || hl.Status != "ok" || hl.Models != 1 {
		t.Fatalf("with a model: %d %+v", code, hl)
	}
	if _, err := h.srv.Unload(tiny); err != nil {
		t.Fatal(err)
	}
	if code, hl := get(); code != 503 || hl.Models != 0 || hl.Status != "no model loaded" {
		t.Fatalf("with none: %d %+v", code, hl)
	}
	req, _ := http.NewRequest(http.MethodGet, h.tcp+"/v1/models", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("the rest still needs the key: %v", err)
	}
}
