package synth

import (
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

func TestBPEVocab(t *testing.T) {
	t.Parallel()
	for _, n := range []int{512, 128256} {
		start := time.Now()
		v, err := BPEVocab(n)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("BPE vocabulary of %d tokens built in %v", n, elapsed)
		nSpecial := 16
		if n == 128256 {
			nSpecial = 256
		}
		base := n - nSpecial
		if len(v.Tokens) != n || len(v.Types) != n || len(v.Merges) != base-256 {
			t.Fatalf("%d tokens, %d types, %d merges", len(v.Tokens), len(v.Types), len(v.Merges))
		}
		index := map[string]int{}
		for i, tok := range v.Tokens {
			if _, dup := index[tok]; dup {
				t.Fatalf("token %q repeated", tok)
			}
			index[tok] = i
		}
		// Byte tokens: GPT-2 unicode, printable ASCII first.
		if v.Tokens[0] != "!" || v.Tokens[93] != "~" || index["Ġ"] == 0 || index["Ċ"] == 0 {
			t.Errorf("byte tokens: %q %q, Ġ at %d, Ċ at %d", v.Tokens[0], v.Tokens[93], index["Ġ"], index["Ċ"])
		}
		// Merge k creates token 256+k from two earlier tokens.
		for k, m := range v.Merges {
			a, b, ok := strings.Cut(m, " ")
			ia, oka := index[a]
			ib, okb := index[b]
			if !ok || !oka || !okb || ia >= 256+k || ib >= 256+k || v.Tokens[256+k] != a+b {
				t.Fatalf("merge %d %q does not build token %q from earlier tokens", k, m, v.Tokens[256+k])
			}
		}
		// Learned merges come first: the corpus's commonest word pieces.
		if index["Ġthe"] > 300 || index["Ġand"] > 300 {
			t.Errorf("Ġthe at %d, Ġand at %d: corpus merges missing", index["Ġthe"], index["Ġand"])
		}
		for i := 0; i < base; i++ {
			if v.Types[i] != TokenNormal {
				t.Fatalf("token %d type %d", i, v.Types[i])
			}
		}
		for i := base; i < n; i++ {
			if v.Types[i] != TokenControl || !strings.HasPrefix(v.Tokens[i], "<|") {
				t.Fatalf("special %d = %q type %d", i, v.Tokens[i], v.Types[i])
			}
		}
		wantSpecial := map[int]string{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "<|eot_id|>", 11: "<|reserved_special_token_3|>"}
		if n == 128256 {
			wantSpecial[255] = "<|reserved_special_token_247|>"
		}
		for k, s := range wantSpecial {
			if v.Tokens[base+k] != s {
				t.Errorf("token %d = %q, want %q", base+k, v.Tokens[base+k], s)
			}
		}
		if v.BOS != base || v.EOS != base+9 {
			t.Errorf("bos %d eos %d", v.BOS, v.EOS)
		}
		if n == 128256 && (v.BOS != 128000 || v.EOS != 128009) {
			t.Errorf("Llama 3 ids: bos %d eos %d", v.BOS, v.EOS)
		}
	}
}

func TestSPMVocab(t *testing.T) {
	t.Parallel()
	for _, n := range []int{512, 256000} {
		start := time.Now()
		v, err := SPMVocab(n)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SentencePiece vocabulary of %d tokens built in %v", n, elapsed)
		if len(v.Tokens) != n || len(v.Types) != n || len(v.Scores) != n || v.Merges != nil {
			t.Fatalf("%d tokens, %d types, %d scores, %d merges", len(v.Tokens), len(v.Types), len(v.Scores), len(v.Merges))
		}
		seen := map[string]bool{}
		for _, tok := range v.Tokens {
			if seen[tok] || tok == "" {
				t.Fatalf("token %q repeated or empty", tok)
			}
			seen[tok] = true
		}
		head := []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<0x00>"}
		for i, s := range head {
			if v.Tokens[i] != s {
				t.Errorf("token %d = %q, want %q", i, v.Tokens[i], s)
			}
		}
		if v.Tokens[261] != "<0xFF>" || v.Types[261] != TokenByte || v.Types[3] != TokenUnknown || v.Types[4] != TokenControl {
			t.Errorf("byte/special types wrong: %q %d %d %d", v.Tokens[261], v.Types[261], v.Types[3], v.Types[4])
		}
		if !seen["▁the"] || !seen["▁"] {
			t.Error("corpus pieces ▁the / ▁ missing")
		}
		prev := float32(1)
		for i := 262; i < n; i++ {
			if v.Types[i] != TokenNormal || v.Scores[i] >= prev || strings.Contains(v.Tokens[i], " ") {
				t.Fatalf("piece %d %q type %d score %v after %v", i, v.Tokens[i], v.Types[i], v.Scores[i], prev)
			}
			prev = v.Scores[i]
		}
		if v.BOS != 2 || v.EOS != 1 || v.PAD != 0 || v.UNK != 3 || v.AddSpacePrefix {
			t.Errorf("ids bos %d eos %d pad %d unk %d, add_space_prefix %v", v.BOS, v.EOS, v.PAD, v.UNK, v.AddSpacePrefix)
		}
	}
}

func TestChatTemplates(t *testing.T) {
	t.Parallel()
	msgs := []any{
		map[string]any{"role": "system", "content": "Be brief."},
		map[string]any{"role": "user", "content": " Hi "},
		map[string]any{"role": "assistant", "content": "Hello."},
		map[string]any{"role": "user", "content": "Bye"},
	}
	cases := []struct {
		name, tmpl, bos, want string
	}{
		{"llama", llamaChatTemplate, "<|begin_of_text|>",
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"gemma2", gemmaChatTemplate, "<bos>",
			"<bos><start_of_turn>system\nBe brief.<end_of_turn>\n" +
				"<start_of_turn>user\nHi<end_of_turn>\n" +
				"<start_of_turn>model\nHello.<end_of_turn>\n" +
				"<start_of_turn>user\nBye<end_of_turn>\n" +
				"<start_of_turn>model\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tmpl, err := jinja.Compile(c.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(map[string]any{"messages": msgs, "bos_token": c.bos, "add_generation_prompt": true})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("rendered\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}
