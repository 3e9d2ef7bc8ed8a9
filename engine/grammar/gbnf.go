package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The GBNF syntax (llama.cpp's grammars/README): rules `name ::= expr`,
// alternatives `|`, sequences, groups `( )`, the postfix operators `?`,
// `*`, `+`, `{m}`, `{m,}`, `{m,n}`, `{,n}`, string literals with escapes,
// character classes `[a-z]` and `[^...]`, `.` (any character) and `#`
// comments to the end of the line. A rule's body ends at a newline unless
// the newline is inside parentheses or follows `::=` or `|`.

// expr is the parsed form of a rule body before lowering.
type expr struct {
	kind  exprKind
	alts  [][]*expr // exAlt: alternatives, each a sequence
	runes []rune    // exLit
	set   []rng     // exClass (already complemented when negated)
	name  string    // exRef
	sub   *expr     // exRep
	min   int       // exRep
	max   int       // exRep; -1 = unbounded
	line  int       // where the reference appears, for errors
}

type exprKind uint8

const (
	exAlt exprKind = iota
	exLit
	exClass
	exRef
	exRep
)

// maxRepeat bounds the counts of {m,n}: each unit of a count becomes
// grammar elements, so an absurd count is refused rather than allocated.
const maxRepeat = 10000

// maxNesting bounds how deeply groups nest, so that hostile text cannot
// drive the recursive parser arbitrarily deep.
const maxNesting = 256

// parser reads GBNF text.
type parser struct {
	src   string
	pos   int
	line  int
	depth int
}

// SyntaxError is a GBNF text that does not parse, with its line.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("grammar line %d: %s", e.Line, e.Msg) }

func (p *parser) errorf(format string, a ...any) error {
	return &SyntaxError{Line: p.line, Msg: fmt.Sprintf(format, a...)}
}

// Parse parses GBNF text and lowers it into a Grammar whose start rule is
// "root". It refuses undefined or duplicate rules, left recursion (which
// a top-down matcher cannot run) and grammars too large to hold.
func Parse(src string) (*Grammar, error) {
	if !utf8.ValidString(src) {
		return nil, &SyntaxError{Line: 1, Msg: "grammar is not valid UTF-8"}
	}
	p := &parser{src: src, line: 1}
	var names []string
	bodies := map[string]*expr{}
	lines := map[string]int{}
	for {
		p.space(true)
		if p.pos >= len(p.src) {
			break
		}
		name := p.name()
		if name == "" {
			return nil, p.errorf("expected a rule name, found %q", p.peekText())
		}
		if _, dup := bodies[name]; dup {
			return nil, p.errorf("rule %q is defined twice (first on line %d)", name, lines[name])
		}
		line := p.line
		p.space(false)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return nil, p.errorf("expected ::= after rule name %q", name)
		}
		p.pos += 3
		p.space(true)
		body, err := p.alternatives(false)
		if err != nil {
			return nil, err
		}
		p.space(false)
		if p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
			return nil, p.errorf("unexpected %q at the end of rule %q", p.peekText(), name)
		}
		names = append(names, name)
		bodies[name] = body
		lines[name] = line
	}
	if len(names) == 0 {
		return nil, &SyntaxError{Line: 1, Msg: "grammar has no rules"}
	}
	if _, ok := bodies["root"]; !ok {
		return nil, &SyntaxError{Line: 1, Msg: `grammar has no "root" rule`}
	}
	g, err := lower(names, bodies, lines)
	if err != nil {
		return nil, err
	}
	g.src = src
	return g, nil
}

// peekText is a short excerpt at the cursor, for errors.
func (p *parser) peekText() string {
	end := min(len(p.src), p.pos+12)
	if i := strings.IndexAny(p.src[p.pos:end], "\r\n"); i >= 0 {
		end = p.pos + i
	}
	if p.pos >= len(p.src) {
		return "end of input"
	}
	return p.src[p.pos:end]
}

// space skips blanks and comments; newlines too when newlines is set.
func (p *parser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case (c == '\n' || c == '\r') && newlines:
			if c == '\n' {
				p.line++
			}
			p.pos++
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *parser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

// atRuleStart reports whether the cursor is at `name ::=`, which ends
// the previous rule's body even where newlines are otherwise skipped.
func (p *parser) atRuleStart() bool {
	q := *p
	if q.name() == "" {
		return false
	}
	q.space(false)
	return strings.HasPrefix(q.src[q.pos:], "::=")
}

// alternatives parses `seq | seq | …`; nested is set inside parentheses.
func (p *parser) alternatives(nested bool) (*expr, error) {
	e := &expr{kind: exAlt}
	for {
		seq, err := p.sequence(nested)
		if err != nil {
			return nil, err
		}
		e.alts = append(e.alts, seq)
		save, line := p.pos, p.line
		// A top-level body may go on with `|` at the start of a new line.
		p.space(true)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		p.pos, p.line = save, line
		return e, nil
	}
}

// sequence parses items up to `|`, `)`, or (at the top level) a newline.
func (p *parser) sequence(nested bool) ([]*expr, error) {
	var seq []*expr
	for {
		p.space(nested)
		if p.pos >= len(p.src) {
			return seq, nil
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || c == '\n' || c == '\r' {
			return seq, nil
		}
		if nested && p.atRuleStart() {
			return nil, p.errorf("missing ) before the next rule")
		}
		if !nested && p.atRuleStart() {
			return seq, nil
		}
		item, err := p.item(nested)
		if err != nil {
			return nil, err
		}
		item, err = p.postfix(item)
		if err != nil {
			return nil, err
		}
		seq = append(seq, item)
	}
}

// item parses one literal, class, reference, `.` or group.
func (p *parser) item(nested bool) (*expr, error) {
	c := p.src[p.pos]
	switch {
	case c == '"':
		p.pos++
		var rs []rune
		for {
			if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
				return nil, p.errorf("unterminated string literal")
			}
			if p.src[p.pos] == '"' {
				p.pos++
				return &expr{kind: exLit, runes: rs}, nil
			}
			r, err := p.char()
			if err != nil {
				return nil, err
			}
			rs = append(rs, r)
		}
	case c == '[':
		return p.class()
	case c == '.':
		p.pos++
		return &expr{kind: exClass, set: []rng{{0, maxRune}}}, nil
	case c == '(':
		if p.depth++; p.depth > maxNesting {
			return nil, p.errorf("groups nest more than %d deep", maxNesting)
		}
		defer func() { p.depth-- }()
		p.pos++
		p.space(true)
		e, err := p.alternatives(true)
		if err != nil {
			return nil, err
		}
		p.space(true)
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errorf("expected ) to close the group, found %q", p.peekText())
		}
		p.pos++
		return e, nil
	case isNameByte(c):
		line := p.line
		return &expr{kind: exRef, name: p.name(), line: line}, nil
	case c == '<' || c == '!':
		return nil, p.errorf("token references (<...>) are not supported; write the text as a literal")
	}
	return nil, p.errorf("unexpected %q", p.peekText())
}

// char reads one character of a literal or class, resolving escapes.
func (p *parser) char() (rune, error) {
	if p.src[p.pos] != '\\' {
		r, n := utf8.DecodeRuneInString(p.src[p.pos:])
		p.pos += n
		return r, nil
	}
	if p.pos+1 >= len(p.src) {
		return 0, p.errorf("escape at the end of the grammar")
	}
	e := p.src[p.pos+1]
	p.pos += 2
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/', '\'':
		return rune(e), nil
	case 'x', 'u', 'U':
		n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
		if p.pos+n > len(p.src) {
			return 0, p.errorf(`\%c needs %d hex digits`, e, n)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil {
			return 0, p.errorf(`\%c needs %d hex digits, got %q`, e, n, p.src[p.pos:p.pos+n])
		}
		p.pos += n
		if v > maxRune || v >= 0xD800 && v <= 0xDFFF {
			return 0, p.errorf(`\%c%0*x is not a Unicode scalar value`, e, n, v)
		}
		return rune(v), nil
	}
	return 0, p.errorf(`unknown escape \%c`, e)
}

// class parses `[...]` or `[^...]`.
func (p *parser) class() (*expr, error) {
	p.pos++ // [
	neg := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		neg = true
		p.pos++
	}
	var set []rng
	for {
		if p.pos >= len(p.src) || p.src[p.pos] == '\n' {
			return nil, p.errorf("unterminated character class")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("character range %q-%q is reversed", lo, hi)
			}
		}
		set = append(set, rng{lo, hi})
	}
	set = normalize(set)
	if neg {
		set = complement(set)
	}
	if len(set) == 0 {
		return nil, p.errorf("character class matches nothing")
	}
	return &expr{kind: exClass, set: set}, nil
}

// postfix applies any `?`, `*`, `+` or `{…}` following an item.
func (p *parser) postfix(e *expr) (*expr, error) {
	for p.pos < len(p.src) {
		lo, hi := 0, -1
		switch p.src[p.pos] {
		case '?':
			hi = 1
			p.pos++
		case '*':
			p.pos++
		case '+':
			lo = 1
			p.pos++
		case '{':
			var err error
			if lo, hi, err = p.braces(); err != nil {
				return nil, err
			}
		default:
			return e, nil
		}
		e = &expr{kind: exRep, sub: e, min: lo, max: hi}
	}
	return e, nil
}

// braces parses {m}, {m,}, {m,n} and {,n}.
func (p *parser) braces() (lo, hi int, err error) {
	end := strings.IndexByte(p.src[p.pos:], '}')
	if end < 0 {
		return 0, 0, p.errorf("unterminated {…} repetition")
	}
	body := strings.ReplaceAll(p.src[p.pos+1:p.pos+end], " ", "")
	p.pos += end + 1
	num := func(s string) (int, error) {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, p.errorf("repetition count %q is not a non-negative integer", s)
		}
		if v > maxRepeat {
			return 0, p.errorf("repetition count %d is larger than %d", v, maxRepeat)
		}
		return v, nil
	}
	a, b, comma := strings.Cut(body, ",")
	switch {
	case !comma:
		lo, err = num(a)
		return lo, lo, err
	case a == "" && b == "":
		return 0, 0, p.errorf("repetition {,} needs a bound")
	case a == "":
		hi, err = num(b)
		return 0, hi, err
	}
	if lo, err = num(a); err != nil {
		return 0, 0, err
	}
	if b == "" {
		return lo, -1, nil
	}
	if hi, err = num(b); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, p.errorf("repetition {%d,%d} has its bounds reversed", lo, hi)
	}
	return lo, hi, nil
}
