package toolcall

import (
	"encoding/json"
	"strings"
)

// Delta is one piece of a streamed answer: content text, or a piece of
// the tool call with index Index (its first piece has ID and Name, the
// following ones fragments of Arguments, whose concatenation is the
// arguments' JSON text).
type Delta struct {
	Content string
	Call    bool
	Index   int
	ID      string
	Name    string
	// Arguments is the next fragment of the call's arguments.
	Arguments string
}

// sent is what a Parser has streamed of one call of its current region.
type sent struct {
	header bool
	args   int // bytes of the arguments text streamed
}

// Parser splits a streamed answer into content and tool calls. Feed it
// the text as it is generated, then Close it. Text that may still turn
// out to open a call is held back until it is clear; a call's id and name
// go out once its arguments begin, the arguments as they come.
//
// A region that stops being a call before anything of it was streamed
// goes out as content. One that breaks after its first call was announced
// cannot be taken back: the calls streamed stand (the broken one with the
// arguments it had) and the text from where it broke is read on. Parse,
// which sees the whole answer, is stricter.
type Parser struct {
	f       Family
	newID   func() string
	buf     string // text not yet streamed (text mode) or the current region
	region  bool
	started bool   // non-space content has been streamed: a Llama 3 or Generic call may no longer begin
	whole   bool   // a Generic region in a form read only once complete
	lead    string // space before a possible call at the start, given back if it is none
	sent    []sent
	calls   []Call // every call announced, arguments as streamed
	done    []bool // which of calls were read to their end
	base    int    // index of the current region's first call
	types   func(fn, param string) string
}

// Types tells the parser the functions' parameter types, from the tools'
// schemas: what a syntax that writes values untyped needs to tell the
// string "42" from the number. It returns p.
func (p *Parser) Types(tools []Tool) *Parser {
	m := map[[2]string]string{}
	for _, t := range tools {
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.Parameters, &schema) != nil {
			continue
		}
		for name, prop := range schema.Properties {
			if typ, ok := prop.Type.(string); ok {
				m[[2]string{t.Name, name}] = typ
			}
		}
	}
	p.types = func(fn, param string) string { return m[[2]string{fn, param}] }
	return p
}

// NewParser returns a parser for f's syntax; newID names each call (nil:
// NewID(f)).
func NewParser(f Family, newID func() string) *Parser {
	if newID == nil {
		newID = func() string { return NewID(f) }
	}
	return &Parser{f: f, newID: newID}
}

// Feed reads the next generated text and returns what can be streamed.
func (p *Parser) Feed(text string) []Delta {
	p.buf += text
	return p.step(false)
}

// Close ends the answer and returns the rest of it.
func (p *Parser) Close() []Delta { return p.step(true) }

// Calls returns the calls streamed so far.
func (p *Parser) Calls() []Call { return p.calls }

// opener finds where a region may begin in s: at (>= 0) when one begins
// there, else hold, the length of s that is surely content (the rest
// could still become an opener). skip is the length of the opener's
// marker, for giving it back as content when the region turns out not to
// be calls.
func (p *Parser) opener(s string) (at, hold, skip int) {
	var marker string
	switch p.f {
	case Hermes:
		marker = hermesOpen
	case Mistral:
		marker = mistralCalls
	case Llama3:
		marker = pythonTag
	}
	if !p.started && (p.f == Llama3 || p.f == Generic) {
		t := strings.TrimLeft(s, " \t\r\n")
		if t == "" {
			return -1, 0, 0
		}
		if t[0] == '{' || t[0] == '[' && p.f == Generic || p.f == Generic && strings.HasPrefix(t, "`") {
			return len(s) - len(t), 0, 1
		}
	}
	if marker == "" {
		return -1, len(s), 0
	}
	if k := strings.Index(s, marker); k >= 0 {
		return k, 0, len(marker)
	}
	for k := max(0, len(s)-len(marker)+1); k < len(s); k++ {
		if strings.HasPrefix(marker, s[k:]) {
			return -1, k, 0
		}
	}
	return -1, len(s), 0
}

func (p *Parser) content(out []Delta, s string) []Delta {
	s, p.lead = p.lead+s, ""
	if s == "" {
		return out
	}
	if strings.TrimSpace(s) != "" {
		p.started = true
	}
	if n := len(out); n > 0 && !out[n-1].Call {
		out[n-1].Content += s
		return out
	}
	return append(out, Delta{Content: s})
}

func (p *Parser) step(final bool) []Delta {
	var out []Delta
	for {
		if !p.region {
			at, hold, _ := p.opener(p.buf)
			if at >= 0 {
				if pre := p.buf[:at]; p.started || strings.TrimSpace(pre) != "" {
					out = p.content(out, pre)
				} else {
					p.lead += pre // space before a call is dropped, before text kept
				}
				p.buf, p.region, p.sent, p.base = p.buf[at:], true, nil, len(p.calls)
				continue
			}
			if final {
				hold = len(p.buf)
			}
			rel := p.buf[:hold]
			p.buf = p.buf[hold:]
			if !p.started && !final && strings.TrimSpace(rel) == "" {
				p.lead += rel // the answer may yet open with a call
			} else if rel != "" || final {
				out = p.content(out, rel)
			}
			return out
		}
		if p.whole {
			if !final {
				return out
			}
			if calls, ok := genericCalls(p.buf); ok {
				out = p.emit(out, region{calls: calls})
			} else {
				out = p.content(out, p.buf)
			}
			p.buf, p.region, p.whole = "", false, false
			return out
		}
		rg := readRegion(p.f, p.buf, p.types)
		if p.f == Generic && rg.st == stBad && !p.announced() {
			p.whole = true // an envelope or a fence: read once it is all there
			continue
		}
		out = p.emit(out, rg)
		switch {
		case rg.st == stEnd:
			p.buf, p.region, p.started = p.buf[rg.end:], false, true
			continue
		case rg.st == stMore && !final:
			return out
		case rg.st == stMore: // the answer ended inside a region
			if p.announced() {
				p.buf = ""
			} else {
				out = p.content(out, p.buf)
				p.buf = ""
			}
			p.region = false
			return out
		}
		// stBad: give back what was not streamed as content.
		p.region, p.started = false, true
		if !p.announced() {
			_, _, skip := p.opener(p.buf)
			skip = max(skip, 1)
			out = p.content(out, p.buf[:skip])
			p.buf = p.buf[skip:]
			continue
		}
		// Calls were announced: they stand. What follows the last whole
		// one, or (if the broken call was announced too) the text from
		// where it broke, is read again as text.
		last := rg.calls[len(rg.calls)-1]
		from := last.start
		if len(p.sent) >= len(rg.calls) && p.sent[len(rg.calls)-1].header {
			from = rg.end
		}
		p.buf = p.buf[from:]
	}
}

// announced reports whether a call of the current region has been
// streamed.
func (p *Parser) announced() bool { return len(p.sent) > 0 && p.sent[0].header }

// emit streams what rg holds beyond what was streamed already.
func (p *Parser) emit(out []Delta, rg region) []Delta {
	for i, c := range rg.calls {
		if !c.nameDone || !c.argsOpen || c.argsStr && !c.argsDone {
			break
		}
		if i == len(p.sent) {
			p.sent = append(p.sent, sent{})
		}
		s := &p.sent[i]
		idx := p.base + i
		if !s.header {
			s.header, p.lead = true, ""
			p.calls = append(p.calls, Call{ID: p.newID(), Name: c.name})
			out = append(out, Delta{Call: true, Index: idx, ID: p.calls[idx].ID, Name: c.name})
		}
		if len(c.args) > s.args {
			frag := c.args[s.args:]
			s.args = len(c.args)
			p.calls[idx].Arguments += frag
			out = append(out, Delta{Call: true, Index: idx, Arguments: frag})
		}
		if !c.done {
			break
		}
		for len(p.done) <= idx {
			p.done = append(p.done, false)
		}
		p.done[idx] = true
	}
	return out
}

// Parse splits a whole answer into its content and tool calls. The calls
// are kept only when every one was read to its end and its arguments are
// a JSON object; otherwise the whole text is content and calls is nil.
func Parse(f Family, text string, newID func() string) (content string, calls []Call) {
	return NewParser(f, newID).Parse(text)
}

// Parse reads a whole answer with a fresh parser, as the function Parse
// does (with the parameter types p was given).
func (p *Parser) Parse(text string) (content string, calls []Call) {
	var b strings.Builder
	for _, d := range append(p.Feed(text), p.Close()...) {
		b.WriteString(d.Content)
	}
	calls = p.Calls()
	if len(calls) == 0 {
		return text, nil
	}
	for i, c := range calls {
		var obj map[string]json.RawMessage
		if i >= len(p.done) || !p.done[i] || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
			return text, nil
		}
	}
	return b.String(), calls
}
