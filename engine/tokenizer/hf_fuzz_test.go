package tokenizer

import "testing"

// FuzzVocabFromHF feeds VocabFromHF arbitrary tokenizer.json and
// tokenizer_config.json bytes: it must return a valid vocabulary or an
// error, never panic or allocate by an id far out.
func FuzzVocabFromHF(f *testing.F) {
	f.Add([]byte(`{"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`), []byte(`{"eos_token":"ab"}`), 0)
	f.Add([]byte(`{"normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},"added_tokens":[{"id":0,"content":"<s>","special":true}],
		"model":{"type":"BPE","byte_fallback":true,"unk_token":"<s>","vocab":{"<s>":0,"▁":1,"a":2,"▁a":3},"merges":[["▁","a"]]}}`), []byte(`{"bos_token":{"content":"<s>"},"add_bos_token":true}`), 8)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":2000000000}}}`), []byte(nil), 0)
	f.Fuzz(func(t *testing.T, tj, cj []byte, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		v, err := VocabFromHF(tj, cj, n)
		if err != nil {
			return
		}
		if err := v.validate(); err != nil {
			t.Fatalf("VocabFromHF returned an invalid vocabulary: %v", err)
		}
		if _, err := New(v); err != nil {
			return
		}
	})
}
