package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// JSON Schema's pattern (an ECMA-262 regular expression) as a grammar of
// the JSON string's contents. The output is always a whole match, which
// satisfies the pattern anchored or not. Supported: literals, escapes
// (\d \w \s and their negations, \t \n \r \f \v, \xHH, \uHHHH, escaped
// punctuation), ., classes with ranges and negation, groups ( ) and
// (?: ), alternation, the quantifiers ? * + {n} {n,} {n,m} (lazy or not:
// the same strings), and ^ and $ at the ends. Anything else (lookaround,
// backreferences, \b, anchors inside) is an error.

type reParser struct {
	rs    []rune
	i     int
	depth int
}

var (
	reDigit = []rng{{'0', '9'}}
	reWord  = []rng{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	reSpace = normalize([]rng{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
		{0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}})
	reDot = complement(normalize([]rng{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}))
)

// patternGBNF translates pattern into a GBNF expression for the JSON
// string contents (escapes included) that match it whole.
func patternGBNF(pattern string) (string, error) {
	rs := []rune(pattern)
	if len(rs) > 0 && rs[0] == '^' {
		rs = rs[1:]
	}
	if n := len(rs); n > 0 && rs[n-1] == '$' && (n < 2 || rs[n-2] != '\\') {
		rs = rs[:n-1]
	}
	p := &reParser{rs: rs}
	e, err := p.alt()
	if err != nil {
		return "", err
	}
	if p.i < len(p.rs) {
		return "", fmt.Errorf("unexpected %q at offset %d", p.rs[p.i], p.i)
	}
	return e, nil
}

func (p *reParser) peek() (rune, bool) {
	if p.i < len(p.rs) {
		return p.rs[p.i], true
	}
	return 0, false
}

func (p *reParser) alt() (string, error) {
	var alts []string
	for {
		s, err := p.seq()
		if err != nil {
			return "", err
		}
		alts = append(alts, s)
		if c, ok := p.peek(); !ok || c != '|' {
			break
		}
		p.i++
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "( " + strings.Join(alts, " | ") + " )", nil
}

func (p *reParser) seq() (string, error) {
	var items []string
	for {
		c, ok := p.peek()
		if !ok || c == '|' || c == ')' {
			break
		}
		a, err := p.atom()
		if err != nil {
			return "", err
		}
		if a, err = p.quant(a); err != nil {
			return "", err
		}
		items = append(items, a)
	}
	if len(items) == 0 {
		return `""`, nil
	}
	return strings.Join(items, " "), nil
}

func (p *reParser) atom() (string, error) {
	c := p.rs[p.i]
	switch c {
	case '(':
		p.i++
		if p.depth++; p.depth > maxNesting {
			return "", fmt.Errorf("groups nest more than %d deep", maxNesting)
		}
		defer func() { p.depth-- }()
		if strings.HasPrefix(string(p.rs[p.i:min(p.i+2, len(p.rs))]), "?:") {
			p.i += 2
		} else if c, ok := p.peek(); ok && c == '?' {
			return "", fmt.Errorf("lookaround and named groups ((?...) at offset %d) are not supported", p.i-1)
		}
		e, err := p.alt()
		if err != nil {
			return "", err
		}
		if c, ok := p.peek(); !ok || c != ')' {
			return "", fmt.Errorf("missing ) for the group")
		}
		p.i++
		return "( " + e + " )", nil
	case '[':
		set, err := p.class()
		if err != nil {
			return "", err
		}
		return jsonChars(set)
	case '.':
		p.i++
		return jsonChars(reDot)
	case '\\':
		set, err := p.escape(false)
		if err != nil {
			return "", err
		}
		return jsonChars(set)
	case '^', '$':
		return "", fmt.Errorf("anchor %q inside the pattern (offset %d) is not supported", c, p.i)
	case '*', '+', '?', '{':
		return "", fmt.Errorf("quantifier %q at offset %d follows nothing", c, p.i)
	}
	p.i++
	return jsonChars([]rng{{c, c}})
}

// quant applies a quantifier after atom a, if one follows.
func (p *reParser) quant(a string) (string, error) {
	c, ok := p.peek()
	if !ok {
		return a, nil
	}
	var q string
	switch c {
	case '*', '+', '?':
		q = string(c)
		p.i++
	case '{':
		end := p.i + 1
		for end < len(p.rs) && p.rs[end] != '}' {
			end++
		}
		if end == len(p.rs) {
			return "", fmt.Errorf("unterminated {…} at offset %d", p.i)
		}
		body := string(p.rs[p.i+1 : end])
		lo, hi, comma := strings.Cut(body, ",")
		n, err := strconv.Atoi(lo)
		m := n
		if err == nil && comma {
			m = -1
			if hi != "" {
				m, err = strconv.Atoi(hi)
			}
		}
		if err != nil || n < 0 || (m >= 0 && m < n) {
			return "", fmt.Errorf("bad quantifier {%s} at offset %d", body, p.i)
		}
		if n > maxRepeat || m > maxRepeat {
			return "", fmt.Errorf("quantifier {%s} is larger than %d", body, maxRepeat)
		}
		q = repeat(n, m)
		p.i = end + 1
	default:
		return a, nil
	}
	if c, ok := p.peek(); ok && c == '?' {
		p.i++ // lazy: the same strings
	}
	if c, ok := p.peek(); ok && (c == '*' || c == '+' || c == '{') {
		return "", fmt.Errorf("quantifier after a quantifier at offset %d", p.i)
	}
	return "( " + a + " )" + q, nil
}

// class parses [...] or [^...] into a set of code points.
func (p *reParser) class() ([]rng, error) {
	p.i++ // [
	neg := false
	if c, ok := p.peek(); ok && c == '^' {
		neg = true
		p.i++
	}
	var set []rng
	for {
		c, ok := p.peek()
		if !ok {
			return nil, fmt.Errorf("unterminated character class")
		}
		if c == ']' {
			p.i++
			break
		}
		lo, single, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if !single {
			set = append(set, lo...)
			continue
		}
		if c, ok := p.peek(); ok && c == '-' && p.i+1 < len(p.rs) && p.rs[p.i+1] != ']' {
			p.i++
			hi, hiSingle, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if !hiSingle || hi[0].lo < lo[0].lo {
				return nil, fmt.Errorf("bad range in a character class")
			}
			set = append(set, rng{lo[0].lo, hi[0].lo})
			continue
		}
		set = append(set, lo...)
	}
	set = normalize(set)
	if neg {
		set = complement(set)
	}
	return set, nil
}

// classAtom is one character of a class, or a class escape (single false).
func (p *reParser) classAtom() ([]rng, bool, error) {
	c := p.rs[p.i]
	if c != '\\' {
		p.i++
		return []rng{{c, c}}, true, nil
	}
	set, err := p.escape(true)
	return set, err == nil && len(set) == 1 && set[0].lo == set[0].hi, err
}

// escape parses a backslash escape.
func (p *reParser) escape(inClass bool) ([]rng, error) {
	p.i++ // backslash
	c, ok := p.peek()
	if !ok {
		return nil, fmt.Errorf("pattern ends with a backslash")
	}
	p.i++
	one := func(r rune) ([]rng, error) { return []rng{{r, r}}, nil }
	switch c {
	case 'd':
		return reDigit, nil
	case 'D':
		return complement(reDigit), nil
	case 'w':
		return reWord, nil
	case 'W':
		return complement(reWord), nil
	case 's':
		return reSpace, nil
	case 'S':
		return complement(reSpace), nil
	case 't':
		return one('\t')
	case 'n':
		return one('\n')
	case 'r':
		return one('\r')
	case 'f':
		return one('\f')
	case 'v':
		return one('\v')
	case '0':
		return one(0)
	case 'b':
		if inClass {
			return one('\b')
		}
		return nil, fmt.Errorf(`\b (word boundary) is not supported`)
	case 'x', 'u':
		n := 2
		if c == 'u' {
			n = 4
		}
		if p.i+n > len(p.rs) {
			return nil, fmt.Errorf(`\%c needs %d hex digits`, c, n)
		}
		v, err := strconv.ParseUint(string(p.rs[p.i:p.i+n]), 16, 32)
		if err != nil {
			return nil, fmt.Errorf(`\%c needs %d hex digits`, c, n)
		}
		p.i += n
		if v >= 0xD800 && v <= 0xDFFF {
			return nil, fmt.Errorf(`\u%04X is a surrogate, not a character`, v)
		}
		return one(rune(v))
	}
	if strings.ContainsRune(`\/^$.|?*+()[]{}-`, c) {
		return one(c)
	}
	return nil, fmt.Errorf(`escape \%c is not supported`, c)
}

// jsonChars is a GBNF expression for one character of set as it appears
// inside a JSON string: itself, or escaped where JSON requires it.
func jsonChars(set []rng) (string, error) {
	set = intersect(set, complement([]rng{{0xD800, 0xDFFF}}))
	if len(set) == 0 {
		return "", fmt.Errorf("a character class that matches nothing")
	}
	must := []rng{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}
	var alts []string
	if plain := intersect(set, complement(must)); len(plain) > 0 {
		alts = append(alts, classText(plain))
	}
	for _, r := range intersect(set, must) {
		for c := r.lo; c <= r.hi; c++ {
			var esc string
			switch c {
			case '"':
				esc = `\"`
			case '\\':
				esc = `\\`
			case '\n':
				esc = `\n`
			case '\r':
				esc = `\r`
			case '\t':
				esc = `\t`
			case '\b':
				esc = `\b`
			case '\f':
				esc = `\f`
			default:
				esc = fmt.Sprintf(`\u%04x`, c)
			}
			alts = append(alts, literal(esc))
		}
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "( " + strings.Join(alts, " | ") + " )", nil
}

// intersect returns the code points in both normalized sets.
func intersect(a, b []rng) []rng {
	var out []rng
	for _, x := range a {
		for _, y := range b {
			if lo, hi := max(x.lo, y.lo), min(x.hi, y.hi); lo <= hi {
				out = append(out, rng{lo, hi})
			}
		}
	}
	return normalize(out)
}

// classText writes a normalized set as a GBNF character class.
func classText(set []rng) string {
	var b strings.Builder
	b.WriteByte('[')
	esc := func(r rune) {
		switch {
		case r == ']' || r == '[' || r == '\\' || r == '^' || r == '-':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7F || !utf8.ValidRune(r):
			fmt.Fprintf(&b, `\U%08X`, r)
		case r >= 0x80:
			fmt.Fprintf(&b, `\U%08X`, r)
		default:
			b.WriteRune(r)
		}
	}
	for _, r := range set {
		esc(r.lo)
		if r.hi > r.lo {
			b.WriteByte('-')
			esc(r.hi)
		}
	}
	b.WriteByte(']')
	return b.String()
}
