package tokenizer

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// A pre-tokenizer cuts a raw-text fragment into the pieces that byte-level
// BPE then merges independently. Models differ only here (and in a few
// flags), so every tokenizer.ggml.pre name maps to a list of stages taken
// from the model's tokenizer.json: each stage is a regex whose matches and
// the gaps between them both become pieces, and every later stage runs on
// each piece of the one before, exactly as Hugging Face's Sequence of
// Split(behavior: Isolated) pre-tokenizers does and llama.cpp's
// unicode_regex_split reproduces.
//
// Go's regexp has the same leftmost-first semantics as the backtracking
// engines those patterns were written for, but neither look-ahead nor a
// Unicode \s. compilePattern rewrites the one look-ahead these patterns use
// (\s+(?!\S), see there) and spells \s as the Unicode White_Space set.
type preTokenizer struct {
	// llama3Digits > 0 selects the hand-written scanner of splitLlama3 with
	// that many digits per number piece (3 for Llama 3, 1 for Qwen2): the
	// common case, twice as fast as the regex stages.
	llama3Digits int
	stages       []*preStage
}

// preStage is one compiled regex stage.
type preStage struct {
	re   *regexp.Regexp
	keep int // submatch index whose end ends the match (the look-ahead rewrite), or -1
}

// preSpec describes one pre-tokenizer as its tokenizer.json states it.
type preSpec struct {
	// names are the tokenizer.ggml.pre values llama.cpp's converter writes
	// for it.
	names []string
	// patterns are the stages' regexes in tokenizer.json syntax; empty
	// with llama3Digits set.
	patterns     []string
	llama3Digits int
	// ignoreMerges emits a piece that is a whole token as that token
	// before merging (Llama 3, Tekken); addBOS makes add_bos_token default
	// to true; noBOS drops the "gpt2" default BOS id (GLM-4 has none).
	ignoreMerges, addBOS, noBOS bool
}

// The patterns below are the pre-tokenizer regexes of the models' own
// tokenizer.json files (for "default", llama.cpp's fallback list).
const (
	// gpt2Pattern is GPT-2's byte-level regex, which ByteLevel(use_regex)
	// applies and many models reuse.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern documents what splitLlama3 implements (the differential
	// test runs it through the regex path too).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// cjkPattern isolates runs of CJK ideographs, Hangul and a block below
	// them, as DeepSeek's tokenizers do.
	cjkPattern = `[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+`
	// deepseekLetters is DeepSeek LLM's explicit letter class (cased
	// letters of many scripts), kept as the tokenizer states it.
	deepseekLetters = `A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}`
	// tekkenPattern is Mistral's Tekken regex (Nemo, Small 3, Pixtral's
	// text side): camel-case words split at the capital, digits alone.
	tekkenPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt4oPattern is o200k's regex (GPT-4o, Llama 4): Tekken's with the
	// contractions attached to the word and numbers of up to 3 digits.
	gpt4oPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// bloomPattern splits at whitespace and a few punctuation marks of
	// several scripts (BLOOM, Poro, GPT-3 Finnish, Viking).
	bloomPattern = ` ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+`
	// deepseekV3Words is the word stage of DeepSeek V3 and Hunyuan dense.
	deepseekV3Words = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)

// preSpecs lists every pre-tokenizer strata implements.
var preSpecs = []preSpec{
	{names: []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
		llama3Digits: 3, ignoreMerges: true, addBOS: true},
	{names: []string{"dbrx", "smaug-bpe"}, llama3Digits: 3},
	{names: []string{"glm4", "chatglm-bpe"}, llama3Digits: 3, noBOS: true},
	{names: []string{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2", "hunyuan", "grok-2"},
		llama3Digits: 1},
	{names: []string{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
		"jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion", "exaone4", "granite-docling"},
		patterns: []string{gpt2Pattern}},
	{names: []string{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
		patterns: []string{`\p{N}`, gpt2Pattern}},
	{names: []string{"falcon"},
		patterns: []string{`[\p{P}\$\+<=>\^~\|` + "`" + `]+`, gpt2Pattern, `[0-9][0-9][0-9]`}},
	{names: []string{"default"},
		patterns: []string{`[\p{P}\$\+<=>\^~\|]+`, gpt2Pattern, `\p{N}+`, `[0-9][0-9][0-9]`}},
	{names: []string{"deepseek-llm"},
		patterns: []string{`[\r\n]`, `\s?[` + deepseekLetters + `]+`, `\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+`, `\s+$`, cjkPattern, `\p{N}+`}},
	{names: []string{"deepseek-coder"},
		patterns: []string{`[\r\n]`, `\s?\p{L}+`, `\s?\p{P}+`, cjkPattern, `\p{N}`}},
	{names: []string{"deepseek-v3", "hunyuan-dense"},
		patterns: []string{`\p{N}{1,3}`, `[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+`, deepseekV3Words}},
	{names: []string{"tekken"}, patterns: []string{tekkenPattern}, ignoreMerges: true, addBOS: true},
	{names: []string{"gpt-4o", "llama4", "minimax-m2"}, patterns: []string{gpt4oPattern}},
	{names: []string{"poro-chat", "bloom", "gpt3-finnish"}, patterns: []string{bloomPattern}},
	{names: []string{"viking"}, patterns: []string{bloomPattern, `\p{N}`}},
	{names: []string{"seed-coder"},
		patterns: []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+`}},
	{names: []string{"bailingmoe", "bailingmoe2", "llada-moe"},
		patterns: []string{`'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`}},
	{names: []string{"chameleon"}, addBOS: true,
		patterns: []string{`<sentinel:[0-9]+>`, `(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`, `([\t\n]|    |  )`, `\p{N}`,
			`[\p{P}!-/:-@\[-` + "`" + `{-~]`, gpt2Pattern}},
}

// preIndex maps a tokenizer.ggml.pre name to its spec.
var preIndex = func() map[string]*preSpec {
	m := map[string]*preSpec{}
	for i := range preSpecs {
		for _, n := range preSpecs[i].names {
			if _, dup := m[n]; dup {
				panic("tokenizer: pre-tokenizer " + n + " listed twice")
			}
			m[n] = &preSpecs[i]
		}
	}
	return m
}()

// PreTokenizers returns the tokenizer.ggml.pre names strata supports, sorted.
func PreTokenizers() []string {
	out := make([]string, 0, len(preIndex))
	for n := range preIndex {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// lookupPre returns the spec of a pre-tokenizer name, or an error that names
// it and lists the supported ones: a vocabulary whose pieces strata would cut
// differently from the model's training would feed it ids it never saw.
func lookupPre(name string) (*preSpec, error) {
	if s, ok := preIndex[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown pre-tokenizer %q (%s): strata supports %s",
		name, keyPre, strings.Join(PreTokenizers(), ", "))
}

// compiled holds each spec's compiled stages (*preTokenizer): regexps are
// safe for concurrent use, so every Tokenizer of one kind shares them.
var compiled sync.Map

// compiledPre returns the compiled pre-tokenizer of a spec.
func compiledPre(s *preSpec) (*preTokenizer, error) {
	if p, ok := compiled.Load(s); ok {
		return p.(*preTokenizer), nil
	}
	p, err := newPreTokenizer(s)
	if err != nil {
		return nil, err
	}
	got, _ := compiled.LoadOrStore(s, p)
	return got.(*preTokenizer), nil
}

// newPreTokenizer compiles a spec.
func newPreTokenizer(s *preSpec) (*preTokenizer, error) {
	p := &preTokenizer{llama3Digits: s.llama3Digits}
	for _, pat := range s.patterns {
		st, err := compilePattern(pat)
		if err != nil {
			return nil, err
		}
		p.stages = append(p.stages, st)
	}
	return p, nil
}

// whiteSpace is Unicode's White_Space property, what \s means in the
// engines the patterns were written for (Go's \s is ASCII only):
// unicode.IsSpace's set.
const whiteSpace = `\t\n\v\f\r \x{85}\p{Z}`

// lookAheadWS is the only look-ahead the patterns use. At a run of n
// whitespace characters it matches the whole run when the run ends the text
// and the first n-1 otherwise (leaving the last one to prefix the next word),
// failing for n = 1 before a non-space. Written without look-ahead: the run
// to the end of the text, or the run minus its last character, which the
// keep group marks as the end of the match.
const (
	lookAheadWS = `\s+(?!\S)`
	keepName    = "keep"
	lookAheadGo = `\s+$|(?P<` + keepName + `>\s*\s)\s`
)

// compilePattern turns a tokenizer.json regex into a Go stage: \s+(?!\S)
// (only as a whole top-level alternative) becomes lookAheadGo, \s and \S
// spell out White_Space, and any other look-around is refused.
func compilePattern(pat string) (*preStage, error) {
	src := pat
	if i := strings.Index(src, lookAheadWS); i >= 0 {
		j := i + len(lookAheadWS)
		if (i > 0 && src[i-1] != '|') || (j < len(src) && src[j] != '|') || topLevelDepth(src, i) != 0 {
			return nil, fmt.Errorf("pre-tokenizer pattern %q: %s is supported only as a top-level alternative", pat, lookAheadWS)
		}
		src = src[:i] + lookAheadGo + src[j:]
	}
	if strings.Contains(src, "(?=") || strings.Contains(src, "(?!") || strings.Contains(src, "(?<") {
		return nil, fmt.Errorf("pre-tokenizer pattern %q: look-around is not supported", pat)
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\\' && i+1 < len(src):
			n := src[i+1]
			switch {
			case n == 's' && inClass:
				b.WriteString(whiteSpace)
			case n == 's':
				b.WriteString("[" + whiteSpace + "]")
			case n == 'S' && !inClass:
				b.WriteString("[^" + whiteSpace + "]")
			case n == 'S':
				return nil, fmt.Errorf("pre-tokenizer pattern %q: \\S inside a class is not supported", pat)
			default:
				b.WriteByte(c)
				b.WriteByte(n)
			}
			i++
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' or '^]' right after '[' is a literal; none of the
			// patterns has one, so nothing more to track.
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("pre-tokenizer pattern %q: %w", pat, err)
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("pre-tokenizer pattern %q matches the empty string", pat)
	}
	return &preStage{re: re, keep: re.SubexpIndex(keepName)}, nil
}

// topLevelDepth returns the group nesting depth at byte i of a pattern,
// ignoring escaped and bracketed parentheses.
func topLevelDepth(src string, i int) int {
	depth, inClass := 0, false
	for k := 0; k < i; k++ {
		switch c := src[k]; {
		case c == '\\':
			k++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '(':
			depth++
		case c == ')':
			depth--
		}
	}
	return depth
}

// split appends to out the byte ranges of the pieces of text[start:end]
// that the stage makes: its matches and the non-empty gaps between them.
func (s *preStage) split(text string, start, end int, out [][2]int) [][2]int {
	frag := text[start:end]
	pos := 0
	for pos < len(frag) {
		loc := s.re.FindStringSubmatchIndex(frag[pos:])
		if loc == nil {
			break
		}
		ms, me := pos+loc[0], pos+loc[1]
		if s.keep >= 0 && loc[2*s.keep] >= 0 {
			me = pos + loc[2*s.keep+1]
		}
		if me <= ms {
			break // compilePattern refuses patterns that match nothing; never loop
		}
		if ms > pos {
			out = append(out, [2]int{start + pos, start + ms})
		}
		out = append(out, [2]int{start + ms, start + me})
		pos = me
	}
	if pos < len(frag) {
		out = append(out, [2]int{start + pos, end})
	}
	return out
}

// splitStages runs the regex stages over text and returns the final pieces'
// byte ranges; a and b are scratch buffers.
func (p *preTokenizer) splitStages(text string, a, b [][2]int) (pieces, scratch [][2]int) {
	cur := append(a[:0], [2]int{0, len(text)})
	next := b[:0]
	for _, st := range p.stages {
		next = next[:0]
		for _, r := range cur {
			next = st.split(text, r[0], r[1], next)
		}
		cur, next = next, cur
	}
	return cur, next
}
