package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// tinyToken describes one token of a hand-built vocabulary.
type tinyToken struct {
	text  string
	typ   int32
	score float32
}

// tinyVocab builds a SentencePiece vocabulary from tokens plus the 256 byte
// tokens, and returns it with a text -> id lookup.
func tinyVocab(t *testing.T, tokens []tinyToken) (*Vocab, func(string) int32) {
	t.Helper()
	v := &Vocab{Model: ModelLlama, BOS: -1, EOS: -1, EOT: -1, PAD: -1, UNK: -1}
	ids := map[string]int32{}
	add := func(tt tinyToken) {
		ids[tt.text] = int32(len(v.Tokens))
		v.Tokens = append(v.Tokens, tt.text)
		v.Types = append(v.Types, tt.typ)
		v.Scores = append(v.Scores, tt.score)
	}
	for _, tt := range tokens {
		add(tt)
	}
	for b := 0; b < 256; b++ {
		add(tinyToken{fmt.Sprintf("<0x%02X>", b), TypeByte, 0})
	}
	return v, func(s string) int32 {
		id, ok := ids[s]
		if !ok {
			t.Fatalf("test vocab has no token %q", s)
		}
		return id
	}
}

// gemmaVocab is a miniature Gemma-style vocabulary.
func gemmaVocab(t *testing.T) (*Tokenizer, func(string) int32) {
	t.Helper()
	v, id := tinyVocab(t, []tinyToken{
		{"<pad>", TypeControl, 0}, {"<eos>", TypeControl, 0}, {"<bos>", TypeControl, 0}, {"<unk>", TypeUnknown, 0},
		{"<start_of_turn>", TypeControl, 0}, {"<end_of_turn>", TypeControl, 0}, {"<mask>", TypeUserDefined, 0},
		{"\u2581", TypeNormal, -1},
		{"H", TypeNormal, -10}, {"i", TypeNormal, -10}, {"u", TypeNormal, -10}, {"s", TypeNormal, -10},
		{"e", TypeNormal, -10}, {"r", TypeNormal, -10}, {"m", TypeNormal, -10}, {"o", TypeNormal, -10},
		{"d", TypeNormal, -10}, {"l", TypeNormal, -10},
		{"Hi", TypeNormal, -3}, {"\u2581Hi", TypeNormal, -2},
		{"us", TypeNormal, -5}, {"er", TypeNormal, -5}, {"user", TypeNormal, -4},
		{"mo", TypeNormal, -5}, {"de", TypeNormal, -5}, {"del", TypeNormal, -4.5}, {"model", TypeNormal, -4},
	})
	v.BOS, v.EOS, v.UNK = id("<bos>"), id("<eos>"), id("<unk>")
	v.EOT = id("<end_of_turn>")
	v.AddBOS = true
	v.ChatTemplate = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok, id
}

// TestChatLlama3 checks the built-in Llama 3 format against the real
// template of the test vocabulary.
func TestChatLlama3(t *testing.T) {
	t.Parallel()
	tok := load(t, bpeVocabFile)
	msgs := []Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "  Hi there\n"},
		{Role: "assistant", Content: "Hello."},
		{Role: "user", Content: "Bye"},
	}
	tests := []struct {
		name string
		gen  bool
		want string
	}{
		{"generation prompt", true, "<|begin_of_text|>" +
			"<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"no generation prompt", false, "<|begin_of_text|>" +
			"<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>" +
			"<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.chatLlama3(msgs, tc.gen); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}

	// The vocabulary's own Jinja template (which always appends the assistant
	// header), which ApplyChatTemplate renders, must give the same text as
	// the built-in format, its fallback.
	viaJinja, err := tok.ApplyChatTemplate(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	if viaJinja != tests[0].want {
		t.Errorf("Jinja rendering of the GGUF template differs:\n got %q\nwant %q", viaJinja, tests[0].want)
	}

	// Encoded as documented, the prompt starts with exactly one BOS and every
	// marker is a single control token.
	ids := tok.Encode(tests[0].want, false, true)
	want := []int32{128000, 128006}
	if !equalIDs(ids[:2], want) || ids[2] == 128000 {
		t.Errorf("prompt ids start %v, want %v", ids[:3], want)
	}
	count := map[int32]int{}
	for _, id := range ids {
		count[id]++
	}
	if count[128006] != 5 || count[128007] != 5 || count[128009] != 4 || count[128000] != 1 {
		t.Errorf("marker counts: start %d end %d eot %d bos %d", count[128006], count[128007], count[128009], count[128000])
	}
}

// TestChatGemma checks the built-in Gemma format, the fallback for a
// Gemma template the engine cannot render.
func TestChatGemma(t *testing.T) {
	t.Parallel()
	tok, id := gemmaVocab(t)
	tests := []struct {
		name string
		msgs []Message
		gen  bool
		want string
	}{
		{"system merged into first user turn", []Message{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Hi"},
			{Role: "assistant", Content: " Hello! "},
			{Role: "user", Content: "Bye"},
		}, true, "<bos>" +
			"<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n" +
			"<start_of_turn>model\nHello!<end_of_turn>\n" +
			"<start_of_turn>user\nBye<end_of_turn>\n" +
			"<start_of_turn>model\n"},
		{"no generation prompt", []Message{{Role: "user", Content: "Hi"}}, false,
			"<bos><start_of_turn>user\nHi<end_of_turn>\n"},
		{"system only", []Message{{Role: "system", Content: "Rules."}}, true,
			"<bos><start_of_turn>user\nRules.<end_of_turn>\n<start_of_turn>model\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.chatGemma(tc.msgs, tc.gen); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}

	prompt := tok.chatGemma([]Message{{Role: "user", Content: "Hi"}}, true)
	nl := id("<0x0A>")
	want := []int32{id("<bos>"), id("<start_of_turn>"), id("user"), nl, id("Hi"), id("<end_of_turn>"), nl,
		id("<start_of_turn>"), id("model"), nl}
	if got := tok.Encode(prompt, false, true); !equalIDs(got, want) {
		t.Errorf("Encode(prompt) = %v, want %v", got, want)
	}
	if !tok.IsEOG(id("<end_of_turn>")) || !tok.IsEOG(id("<eos>")) || tok.IsEOG(id("<bos>")) {
		t.Error("IsEOG wrong for Gemma markers")
	}
}

func TestChatJinjaAndPlain(t *testing.T) {
	t.Parallel()
	base := func(tmpl string) *Tokenizer {
		v := &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>"}, Types: []int32{2, 3, 3},
			BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddBOS: true, AddSpacePrefix: true, ChatTemplate: tmpl}
		tok, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	chatml := "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
		"{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
	msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: " Hi "}}
	tests := []struct {
		name    string
		tmpl    string
		gen     bool
		format  ChatFormat
		want    string
		wantErr string
	}{
		{"jinja", chatml, true, ChatJinja, "<s><|im_start|>system\nS<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n", ""},
		{"jinja no prompt", chatml, false, ChatJinja, "<s><|im_start|>system\nS<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n", ""},
		{"jinja eos", "{{ messages[1].content }}{{ eos_token }}", false, ChatJinja, " Hi </s>", ""},
		{"raise", "{{ raise_exception('no system role') }}", true, ChatJinja, "", "no system role"},
		{"syntax error", "{% for m in messages %}", true, ChatJinja, "", "compile chat template"},
		{"plain", "", true, ChatPlain, "<s>system: S\nuser:  Hi \nassistant:", ""},
		{"plain no prompt", "  ", false, ChatPlain, "<s>system: S\nuser:  Hi \n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := base(tc.tmpl)
			if f := tok.ChatFormat(); f != tc.format {
				t.Errorf("ChatFormat = %v, want %v", f, tc.format)
			}
			got, err := tok.ApplyChatTemplate(msgs, tc.gen)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if _, err := base("").ApplyChatTemplate([]Message{{Role: " ", Content: "x"}}, true); err == nil {
		t.Error("empty role accepted")
	}
}

func TestDetectChatFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl string
		want ChatFormat
	}{
		{"", ChatPlain},
		{"{{ '<|start_header_id|>' + m.role + '<|end_header_id|>' }}", ChatLlama3},
		{"{{ '<start_of_turn>' + role }}", ChatGemma},
		{"<|im_start|>", ChatJinja},
	}
	for _, tc := range tests {
		t.Run(tc.want.String(), func(t *testing.T) {
			t.Parallel()
			if got := DetectChatFormat(tc.tmpl); got != tc.want {
				t.Errorf("DetectChatFormat(%q) = %v, want %v", tc.tmpl, got, tc.want)
			}
		})
	}
}

func TestUserDefinedAndFallback(t *testing.T) {
	t.Parallel()
	tok, id := gemmaVocab(t)
	tests := []struct {
		name         string
		text         string
		parseSpecial bool
		want         []int32
	}{
		// User-defined tokens are matched even without parseSpecial.
		{"user-defined", "Hi<mask>Hi", false, []int32{id("Hi"), id("<mask>"), id("Hi")}},
		{"control not parsed", "<eos>", false, []int32{id("<0x3C>"), id("e"), id("o"), id("s"), id("<0x3E>")}},
		{"control parsed", "<eos>", true, []int32{id("<eos>")}},
		{"space", " Hi", false, []int32{id("\u2581Hi")}},
		{"byte fallback", "Hé", false, []int32{id("H"), id("<0xC3>"), id("<0xA9>")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tok.Encode(tc.text, false, tc.parseSpecial); !equalIDs(got, tc.want) {
				t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}

	// Without byte tokens, unknown characters become UNK (one per byte).
	v := &Vocab{Model: ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>", "\u2581", "a", "\u2581a"},
		Types: []int32{2, 3, 3, 1, 1, 1}, Scores: []float32{0, 0, 0, -1, -1, -1},
		BOS: 1, EOS: 2, EOT: -1, PAD: -1, UNK: 0, AddSpacePrefix: true}
	nob, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := nob.Encode("ab é", false, false), []int32{5, 0, 3, 0, 0}; !equalIDs(got, want) {
		t.Errorf("Encode without byte tokens = %v, want %v", got, want)
	}
}

// TestSPMSegmentation checks that cutting SentencePiece input into segments
// (encodeSPM's speed-up) gives the same ids as merging it whole.
func TestSPMSegmentation(t *testing.T) {
	t.Parallel()
	spm := load(t, spmVocabFile)
	v := spm.Vocab()
	whole, err := New(&v)
	if err != nil {
		t.Fatal(err)
	}
	whole.noSPMCut = true
	inputs := []string{benchText(16 << 10), "a  b   c \u2581\u2581x", "\u2581\u2581\u2581", "日本 語  \t\n x", "\xff \xfe\u2581 z"}
	for _, v := range loadVectors(t, spmVocabFile) {
		inputs = append(inputs, v.in)
	}
	for i, in := range inputs {
		got := spm.Encode(in, true, false)
		want := whole.Encode(in, true, false)
		if !equalIDs(got, want) {
			t.Errorf("input %d: segmented %v, whole %v", i, got, want)
		}
	}
}
