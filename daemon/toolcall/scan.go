package toolcall

import (
	"encoding/json"
	"strings"
)

// res is the outcome of reading one piece of syntax from a prefix of the
// output: read, the text so far is a prefix of it (more), or it cannot be.
type res int

const (
	rOK res = iota
	rMore
	rBad
)

// cursor reads a region of output from position i.
type cursor struct {
	s string
	i int
}

func (c *cursor) eof() bool { return c.i >= len(c.s) }

func (c *cursor) ws() {
	for c.i < len(c.s) && strings.IndexByte(" \t\r\n", c.s[c.i]) >= 0 {
		c.i++
	}
}

// lit reads the literal l.
func (c *cursor) lit(l string) res {
	rest := c.s[c.i:]
	switch {
	case strings.HasPrefix(rest, l):
		c.i += len(l)
		return rOK
	case strings.HasPrefix(l, rest):
		return rMore
	}
	return rBad
}

// str reads a JSON string and returns it decoded.
func (c *cursor) str() (string, res) {
	end, r := scanValue(c.s, c.i)
	if r != rOK {
		return "", r
	}
	if c.s[c.i] != '"' {
		return "", rBad
	}
	var v string
	if json.Unmarshal([]byte(c.s[c.i:end]), &v) != nil {
		return "", rBad
	}
	c.i = end
	return v, rOK
}

// scanValue finds the end of the JSON value that starts at s[i]: objects
// and arrays by their brackets (strings and escapes skipped, mismatched
// brackets refused), strings by their closing quote, scalars by the first
// byte that cannot belong to one. It checks structure, not every detail of
// JSON's grammar: a finished call's arguments are checked with json.Valid.
func scanValue(s string, i int) (int, res) {
	if i >= len(s) {
		return 0, rMore
	}
	switch c := s[i]; {
	case c == '{' || c == '[':
		var stack []byte
		inStr, esc := false, false
		for j := i; j < len(s); j++ {
			c := s[j]
			if inStr {
				switch {
				case esc:
					esc = false
				case c == '\\':
					esc = true
				case c == '"':
					inStr = false
				}
				continue
			}
			switch c {
			case '"':
				inStr = true
			case '{':
				stack = append(stack, '}')
			case '[':
				stack = append(stack, ']')
			case '}', ']':
				if len(stack) == 0 || stack[len(stack)-1] != c {
					return 0, rBad
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return j + 1, rOK
				}
			}
		}
		return 0, rMore
	case c == '"':
		esc := false
		for j := i + 1; j < len(s); j++ {
			switch {
			case esc:
				esc = false
			case s[j] == '\\':
				esc = true
			case s[j] == '"':
				return j + 1, rOK
			}
		}
		return 0, rMore
	case c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z':
		j := i
		for j < len(s) && (s[j] == '-' || s[j] == '+' || s[j] == '.' || s[j] >= '0' && s[j] <= '9' || s[j] >= 'a' && s[j] <= 'z' || s[j] == 'E') {
			j++
		}
		if j == len(s) {
			return 0, rMore
		}
		return j, rOK
	}
	return 0, rBad
}

// pcall is a call as far as it has been read.
type pcall struct {
	start    int // offset of the call's text in its region
	end      int // offset just past it, once done
	name     string
	nameDone bool
	args     string // the arguments value's text so far (decoded when argsStr)
	argsOpen bool   // the arguments value has begun
	argsStr  bool   // the arguments were given as a JSON string holding the JSON
	argsDone bool
	done     bool // the whole call has been read
}

// status of a region of output read so far.
type status int

const (
	stMore status = iota // a prefix of calls: more text may continue it
	stEnd                // calls, then at end text that is no part of them
	stBad                // not (or no longer) calls, from the start of the last call read
)

// region is what readRegion found.
type region struct {
	calls []pcall
	st    status
	end   int // stEnd: where the calls' text ends; stBad: where reading failed
}

// callKeys are the keys a call object may have; any other key as the
// first one means the object is not a call, so a parser can give the text
// back as content early.
var callKeys = map[string]bool{"name": true, "arguments": true, "parameters": true, "id": true, "type": true, "function": true}

// callObject reads {"name": "…", "arguments": {…}} (or "parameters", or
// OpenAI's {"type": "function", "function": {…}} wrapping) into pc.
func callObject(c *cursor, pc *pcall, top bool) res {
	if r := c.lit("{"); r != rOK {
		return r
	}
	c.ws()
	if c.eof() {
		return rMore
	}
	if c.s[c.i] == '}' {
		return rBad // an empty object names no function
	}
	for {
		key, r := c.str()
		if r != rOK {
			return r
		}
		if !callKeys[key] {
			return rBad
		}
		c.ws()
		if r := c.lit(":"); r != rOK {
			return r
		}
		c.ws()
		if c.eof() {
			return rMore
		}
		if key == "name" && pc.nameDone || (key == "arguments" || key == "parameters") && pc.argsOpen {
			return rBad // a second name or arguments: which is meant?
		}
		switch key {
		case "name":
			v, r := c.str()
			if r != rOK {
				return r
			}
			if v == "" {
				return rBad
			}
			pc.name, pc.nameDone = v, true
		case "arguments", "parameters":
			start := c.i
			if c.s[start] == '"' {
				v, r := c.str()
				if r != rOK {
					return r
				}
				pc.args, pc.argsStr, pc.argsOpen, pc.argsDone = v, true, true, true
				break
			}
			if r := argsObject(c, pc); r != rOK {
				return r
			}
		case "function":
			if r := callObject(c, pc, false); r != rOK {
				return r
			}
		default:
			end, r := scanValue(c.s, c.i)
			if r != rOK {
				return r
			}
			c.i = end
		}
		c.ws()
		if c.eof() {
			return rMore
		}
		switch c.s[c.i] {
		case ',':
			c.i++
			c.ws()
			continue
		case '}':
			c.i++
			if !pc.nameDone || pc.name == "" {
				return rBad
			}
			if !pc.argsDone {
				pc.args, pc.argsOpen, pc.argsDone = "{}", true, true
			}
			if top {
				pc.done, pc.end = true, c.i
			}
			return rOK
		}
		return rBad
	}
}

// readRegion reads the calls at the start of s (a region the Parser found
// to begin with f's opener) as far as s goes. types gives the JSON type a
// function's parameter has in its schema ("" when unknown), for syntaxes
// that write values untyped.
func readRegion(f Family, s string, types func(fn, param string) string) region {
	var rg region
	c := &cursor{s: s}
	fail := func(r res) region {
		if r == rMore {
			rg.st = stMore
		} else {
			rg.st, rg.end = stBad, c.i
		}
		return rg
	}
	call := func() res {
		rg.calls = append(rg.calls, pcall{start: c.i})
		return callObject(c, &rg.calls[len(rg.calls)-1], true)
	}
	// array reads "[call, call, …]", c at its '['.
	array := func() res {
		c.i++
		for {
			c.ws()
			if r := call(); r != rOK {
				return r
			}
			c.ws()
			if c.eof() {
				return rMore
			}
			switch c.s[c.i] {
			case ',':
				c.i++
			case ']':
				c.i++
				return rOK
			default:
				return rBad
			}
		}
	}
	// opener reads the marker that opens another call; done reports the
	// end of the calls (no marker after at least one call).
	opener := func(marker string) (done bool, r res) {
		c.ws()
		at := c.i
		if c.eof() {
			return false, rMore
		}
		if r := c.lit(marker); r != rOK {
			if r == rBad && len(rg.calls) > 0 {
				rg.st, rg.end = stEnd, at
				return true, rOK
			}
			return false, r
		}
		return false, rOK
	}
	switch f {
	case Hermes:
		for {
			if done, r := opener(hermesOpen); done {
				return rg
			} else if r != rOK {
				return fail(r)
			}
			c.ws()
			var r res
			if strings.HasPrefix(c.s[c.i:], xmlFunction) || strings.HasPrefix(xmlFunction, c.s[c.i:]) {
				rg.calls = append(rg.calls, pcall{start: c.i})
				r = xmlCall(c, &rg.calls[len(rg.calls)-1], types)
			} else {
				r = call()
			}
			if r != rOK {
				return fail(r)
			}
			c.ws()
			if r := c.lit(hermesClose); r != rOK {
				return fail(r)
			}
		}
	case Mistral:
		for {
			if done, r := opener(mistralCalls); done {
				return rg
			} else if r != rOK {
				return fail(r)
			}
			c.ws()
			if c.eof() {
				return fail(rMore)
			}
			if c.s[c.i] != '[' {
				if r := mistralNamed(c, &rg); r != rOK {
					return fail(r)
				}
				continue
			}
			if r := array(); r != rOK {
				return fail(r)
			}
		}
	case Generic:
		c.ws()
		if c.eof() {
			return fail(rMore)
		}
		if c.s[c.i] != '[' {
			if r := call(); r != rOK {
				return fail(r)
			}
		} else {
			if r := array(); r != rOK {
				return fail(r)
			}
		}
		c.ws()
		if c.eof() {
			return fail(rMore)
		}
		rg.st, rg.end = stEnd, c.i
		return rg
	case Llama3:
		if r := c.lit(pythonTag); r == rMore {
			return fail(r)
		}
		for {
			c.ws()
			if r := call(); r != rOK {
				return fail(r)
			}
			c.ws()
			if c.eof() {
				return fail(rMore)
			}
			if c.s[c.i] == ';' {
				c.i++
				c.ws()
				if c.eof() {
					return fail(rMore)
				}
			}
			if c.s[c.i] != '{' {
				rg.st, rg.end = stEnd, c.i
				return rg
			}
		}
	}
	return fail(rBad)
}

// The XML form of a Hermes call (Qwen 3.5 and Qwen3-Coder):
// <function=NAME> then <parameter=P>VALUE</parameter> per argument, then
// </function>, each on its own line.
const (
	xmlFunction     = "<function="
	xmlFunctionEnd  = "</function>"
	xmlParameter    = "<parameter="
	xmlParameterEnd = "</parameter>"
)

// xmlName reads the name an XML tag's "=" introduces, up to its ">",
// and moves c past it.
func xmlName(c *cursor) (string, res) {
	end := strings.IndexByte(c.s[c.i:], '>')
	if end < 0 {
		return "", rMore
	}
	name := c.s[c.i : c.i+end]
	if name == "" || strings.ContainsAny(name, "<\n") {
		return "", rBad
	}
	c.i += end + 1
	return name, rOK
}

// xmlCall reads the XML form into pc. The values are written untyped: a
// parameter whose schema type is "string" is a string, any other value
// that is JSON is taken as such (a number, an object, …), the rest are
// strings. The arguments grow one parameter at a time, so that a stream
// can send each as it completes.
func xmlCall(c *cursor, pc *pcall, types func(fn, param string) string) res {
	if r := c.lit(xmlFunction); r != rOK {
		return r
	}
	name, r := xmlName(c)
	if r != rOK {
		return r
	}
	pc.name, pc.nameDone, pc.args = name, true, "{" // announced once a parameter, or the call, is complete
	first := true
	for {
		c.ws()
		if r := c.lit(xmlFunctionEnd); r == rOK {
			pc.args += "}"
			pc.argsOpen, pc.argsDone, pc.done, pc.end = true, true, true, c.i
			return rOK
		} else if r == rMore {
			return rMore
		}
		if r := c.lit(xmlParameter); r != rOK {
			return r
		}
		param, r := xmlName(c)
		if r != rOK {
			return r
		}
		v := strings.Index(c.s[c.i:], xmlParameterEnd)
		if v < 0 {
			return rMore
		}
		raw := strings.TrimSuffix(strings.TrimPrefix(c.s[c.i:c.i+v], "\n"), "\n")
		c.i += v + len(xmlParameterEnd)
		value := []byte(strings.TrimSpace(raw))
		typ := ""
		if types != nil {
			typ = types(name, param)
		}
		if typ == "string" || !json.Valid(value) {
			value, _ = json.Marshal(raw) // a string always marshals
		}
		key, _ := json.Marshal(param)
		if !first {
			pc.args += ", "
		}
		first = false
		pc.args += string(key) + ": " + string(value)
		pc.argsOpen = true
	}
}

// mistralNamed reads the newer form name[ARGS]{…} (optionally
// name[CALL_ID]id[ARGS]{…}) that follows [TOOL_CALLS].
func mistralNamed(c *cursor, rg *region) res {
	rg.calls = append(rg.calls, pcall{start: c.i})
	pc := &rg.calls[len(rg.calls)-1]
	j := c.i
	for j < len(c.s) && c.s[j] != '[' {
		ch := c.s[j]
		if !(ch == '_' || ch == '-' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return rBad
		}
		j++
	}
	if j == len(c.s) {
		return rMore
	}
	if j == c.i {
		return rBad
	}
	pc.name, pc.nameDone = c.s[c.i:j], true
	c.i = j
	if r := c.lit(mistralID); r == rOK {
		k := strings.IndexByte(c.s[c.i:], '[')
		if k < 0 {
			return rMore
		}
		c.i += k
	} else if r == rMore {
		return rMore
	}
	if r := c.lit(mistralArgs); r != rOK {
		return r
	}
	if c.eof() {
		return rMore
	}
	if r := argsObject(c, pc); r != rOK {
		return r
	}
	pc.done, pc.end = true, c.i
	return rOK
}

// genericCalls reads a whole Generic answer: a call object, an array of
// them, or an object with "tool_calls" (an array) or "tool_call" (one),
// optionally inside a ``` fence. ok is false when the text is none of
// these.
func genericCalls(text string) (calls []pcall, ok bool) {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "```") {
		t = strings.TrimPrefix(t, "```")
		if nl := strings.IndexByte(t, '\n'); nl >= 0 && !strings.ContainsAny(t[:nl], "{[") {
			t = t[nl+1:]
		}
		t = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), "```"))
	}
	one := func(raw json.RawMessage) bool {
		c := &cursor{s: strings.TrimSpace(string(raw))}
		var pc pcall
		if callObject(c, &pc, true) != rOK || c.i != len(c.s) {
			return false
		}
		calls = append(calls, pc)
		return true
	}
	many := func(raw json.RawMessage) bool {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
			return false
		}
		for _, r := range list {
			if !one(r) {
				return false
			}
		}
		return true
	}
	if !json.Valid([]byte(t)) {
		return nil, false
	}
	if strings.HasPrefix(t, "[") {
		return calls, many(json.RawMessage(t))
	}
	var env map[string]json.RawMessage
	if json.Unmarshal([]byte(t), &env) != nil {
		return nil, false
	}
	if raw, has := env["tool_calls"]; has && len(env) == 1 {
		return calls, many(raw)
	}
	if raw, has := env["tool_call"]; has && len(env) == 1 {
		return calls, one(raw)
	}
	return calls, one(json.RawMessage(t))
}

// argsObject reads a call's arguments object at c (an object as it stands,
// or its start so far: pc.args holds what has come, pc.argsOpen is set
// once the brace is seen) and moves c past it.
func argsObject(c *cursor, pc *pcall) res {
	start := c.i
	if c.s[start] != '{' {
		return rBad
	}
	pc.argsOpen = true
	end, r := scanValue(c.s, start)
	if r == rMore {
		pc.args = c.s[start:]
	}
	if r != rOK {
		return r
	}
	pc.args, pc.argsDone = c.s[start:end], true
	c.i = end
	return rOK
}
