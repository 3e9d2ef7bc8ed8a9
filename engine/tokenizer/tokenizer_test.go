package tokenizer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

const (
	bpeVocabFile = "testdata/ggml-vocab-llama-bpe.gguf"
	spmVocabFile = "testdata/ggml-vocab-llama-spm.gguf"
)

var (
	loadOnce  sync.Map // path -> *loaded
	vectorSep = "\n__ggml_vocab_test__\n"
)

type loaded struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// load builds (once per test binary) the tokenizer of a testdata vocab.
func load(t testing.TB, path string) *Tokenizer {
	t.Helper()
	l, _ := loadOnce.LoadOrStore(path, &loaded{})
	ld := l.(*loaded)
	ld.once.Do(func() { ld.tok, ld.err = FromGGUFFile(path) })
	if ld.err != nil {
		t.Fatalf("FromGGUFFile(%s): %v", path, ld.err)
	}
	return ld.tok
}

type vector struct {
	in   string
	want []int32
}

// loadVectors reads llama.cpp's test-tokenizer-0 files: the .inp file holds
// inputs each terminated by "\n__ggml_vocab_test__\n" (the first starts at
// offset 0); the .out file holds one line per input with the expected ids,
// each preceded by a space (an empty line for no tokens).
func loadVectors(t *testing.T, vocab string) []vector {
	t.Helper()
	inp, err := os.ReadFile(vocab + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	outp, err := os.ReadFile(vocab + ".out")
	if err != nil {
		t.Fatal(err)
	}
	ins := strings.Split(string(inp), vectorSep)
	if ins[len(ins)-1] != "" {
		t.Fatalf("%s.inp does not end with the separator", vocab)
	}
	ins = ins[:len(ins)-1]
	lines := strings.Split(strings.TrimSuffix(string(outp), "\n"), "\n")
	if len(lines) != len(ins) {
		t.Fatalf("%d inputs but %d expected lines", len(ins), len(lines))
	}
	vs := make([]vector, len(ins))
	for i, in := range ins {
		vs[i].in = in
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("line %d: %v", i+1, err)
			}
			vs[i].want = append(vs[i].want, int32(id))
		}
	}
	return vs
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestVectors checks every llama.cpp test-tokenizer-0 vector (encoded with
// add_special=false, parse_special=false, as that test does).
func TestVectors(t *testing.T) {
	t.Parallel()
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			tok := load(t, path)
			vs := loadVectors(t, path)
			pass := 0
			for i, v := range vs {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					got := tok.Encode(v.in, false, false)
					if !equalIDs(got, v.want) {
						t.Errorf("Encode(%q)\n got %v\nwant %v", v.in, got, v.want)
						return
					}
					pass++
				})
			}
			t.Logf("%s: %d/%d vectors match", filepath.Base(path), pass, len(vs))
			if pass != len(vs) {
				t.Errorf("%d/%d vectors match", pass, len(vs))
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			tok := load(t, path)
			for i, v := range loadVectors(t, path) {
				for _, addSpecial := range []bool{false, true} {
					ids := tok.Encode(v.in, addSpecial, false)
					if got := tok.Decode(ids); got != v.in {
						t.Errorf("vector %d addSpecial=%v: Decode(Encode(%q)) = %q", i, addSpecial, v.in, got)
					}
					// The streaming decoder yields the same bytes, each chunk
					// valid UTF-8; it keeps the SentencePiece space prefix.
					d := tok.NewDecoder()
					var sb strings.Builder
					for _, id := range ids {
						chunk := d.Add(id)
						if !utf8.ValidString(chunk) {
							t.Errorf("vector %d: Decoder chunk %q is not valid UTF-8", i, chunk)
						}
						sb.WriteString(chunk)
					}
					sb.WriteString(d.Flush())
					want := v.in
					if tok.Vocab().Model == ModelLlama && v.in != "" {
						want = " " + v.in
					}
					if sb.String() != want {
						t.Errorf("vector %d: streamed %q, want %q", i, sb.String(), want)
					}
				}
			}
		})
	}
}

func TestAddSpecial(t *testing.T) {
	t.Parallel()
	bpe := load(t, bpeVocabFile)
	spm := load(t, spmVocabFile)
	tests := []struct {
		name string
		tok  *Tokenizer
		text string
		want []int32
	}{
		{"bpe hello", bpe, "Hello world", []int32{128000, 9906, 1917}},
		{"bpe empty", bpe, "", []int32{128000}},
		{"spm hello", spm, "Hello world", []int32{1, 15043, 3186}},
		{"spm empty", spm, "", []int32{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.tok.Encode(tc.text, true, false); !equalIDs(got, tc.want) {
				t.Errorf("Encode(%q, true, false) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

func TestSpecialTokens(t *testing.T) {
	t.Parallel()
	bpe := load(t, bpeVocabFile)
	spm := load(t, spmVocabFile)
	// Ids of plain text come from the llama.cpp vectors ("Hello" 9906,
	// " world" 1917, "\n\n" 271; SPM "▁Hello" 15043) and the byte order of
	// the BPE vocabulary ('a' 64, 'b' 65).
	tests := []struct {
		name string
		tok  *Tokenizer
		text string
		want []int32
	}{
		{"eot", bpe, "<|eot_id|>", []int32{128009}},
		{"header", bpe, "<|start_header_id|>Hello<|end_header_id|>\n\n world<|eot_id|>",
			[]int32{128006, 9906, 128007, 271, 1917, 128009}},
		{"text around", bpe, "a<|eot_id|>b", []int32{64, 128009, 65}},
		{"adjacent", bpe, "<|eot_id|><|eot_id|>", []int32{128009, 128009}},
		{"bos", bpe, "<|begin_of_text|>Hello", []int32{128000, 9906}},
		{"spm control", spm, "Hello</s>", []int32{15043, 2}},
		// After a special token SentencePiece adds the space prefix again.
		{"spm prefix after special", spm, "<s>Hello", []int32{1, 15043}},
		{"spm unknown token text", spm, "<unk>", []int32{0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tok.Encode(tc.text, false, true); !equalIDs(got, tc.want) {
				t.Errorf("Encode(%q, false, true) = %v, want %v", tc.text, got, tc.want)
			}
			// Without parseSpecial the same text is ordinary text: no
			// control or unknown token may appear and it decodes back.
			plain := tc.tok.Encode(tc.text, false, false)
			for _, id := range plain {
				if typ := tc.tok.TokenType(id); typ == TypeControl || typ == TypeUnknown {
					t.Errorf("Encode(%q, false, false) contains special id %d (%q)", tc.text, id, tc.tok.Token(id))
				}
			}
			if got := tc.tok.Decode(plain); got != tc.text {
				t.Errorf("Decode(Encode(%q, false, false)) = %q", tc.text, got)
			}
		})
	}
	// Control tokens are hidden by Decode but available through Piece.
	ids := bpe.Encode("Hello<|eot_id|>", false, true)
	if got := bpe.Decode(ids); got != "Hello" {
		t.Errorf("Decode(%v) = %q, want %q", ids, got, "Hello")
	}
	if got := string(bpe.Piece(128009)); got != "<|eot_id|>" {
		t.Errorf("Piece(128009) = %q", got)
	}
}

// TestConcurrentEncode runs encoders in parallel (meaningful under -race):
// the pooled scratch state must not leak between calls.
func TestConcurrentEncode(t *testing.T) {
	t.Parallel()
	for _, path := range []string{bpeVocabFile, spmVocabFile} {
		tok := load(t, path)
		vs := loadVectors(t, path)
		var wg sync.WaitGroup
		errs := make(chan string, len(vs)*4)
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, v := range vs {
					if got := tok.Encode(v.in, false, false); !equalIDs(got, v.want) {
						errs <- v.in
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for in := range errs {
			t.Errorf("%s: concurrent Encode(%q) mismatch", path, in)
		}
	}
}
