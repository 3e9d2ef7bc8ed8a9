package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// JSON Schema to GBNF. The translation is strict in the way OpenAI's
// structured outputs are: an object has exactly the declared properties
// (no others, whatever additionalProperties says, since leaving them out
// is always valid), in the declared order, every required one present.
// What a grammar cannot express, or this translation does not, is an
// error that names the keyword and where it is, never silently dropped.

// Limits of the generic JSON rules: numbers as a float64 or an int64 can
// hold them, and whitespace short enough that a model cannot spend its
// whole budget on it (one space, or a newline and an indent), long
// enough for indented output.
const jsonPrimitives = `
%[1]s-ws ::= ( " " | "\n" [ \t]{0,20} )?
%[1]s-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
%[1]s-string ::= "\"" %[1]s-char* "\""
%[1]s-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
%[1]s-number ::= %[1]s-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
%[1]s-boolean ::= "true" | "false"
%[1]s-null ::= "null"
%[1]s-value ::= %[1]s-object | %[1]s-array | %[1]s-string | %[1]s-number | %[1]s-boolean | %[1]s-null
%[1]s-object ::= "{" %[1]s-ws ( %[1]s-string %[1]s-ws ":" %[1]s-ws %[1]s-value %[1]s-ws ( "," %[1]s-ws %[1]s-string %[1]s-ws ":" %[1]s-ws %[1]s-value %[1]s-ws )* )? "}"
%[1]s-array ::= "[" %[1]s-ws ( %[1]s-value %[1]s-ws ( "," %[1]s-ws %[1]s-value %[1]s-ws )* )? "]"
`

var jsonObject = sync.OnceValues(func() (*Grammar, error) {
	return Parse("root ::= json-object\n" + fmt.Sprintf(jsonPrimitives, "json"))
})

// JSONObject is the grammar of response_format json_object: any JSON
// object (arbitrary keys and values, nested to any depth). It is built
// once; an error would be a bug in the built-in rules.
func JSONObject() (*Grammar, error) { return jsonObject() }

// FromJSONSchema translates a JSON Schema into a grammar of the JSON
// texts valid under it. See SchemaGBNF for what is supported.
func FromJSONSchema(schema []byte) (*Grammar, error) {
	text, err := SchemaGBNF(schema, "root")
	if err != nil {
		return nil, err
	}
	g, err := Parse(text)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return g, nil
}

// SchemaError is a schema the translation refuses, with where (a JSON
// pointer into the schema) and why.
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string { return fmt.Sprintf("json schema at %s: %s", e.Path, e.Msg) }

// SchemaGBNF translates a JSON Schema into GBNF rules whose start rule is
// name, every helper rule named name-…, so that the rules can be embedded
// in a larger grammar (a tool call's envelope around its arguments).
//
// Supported: type (object, array, string, number, integer, boolean, null,
// or a list of them), properties with required and additionalProperties,
// items with minItems and maxItems, minLength and maxLength, enum, const,
// anyOf, oneOf (as anyOf: exact when the branches are disjoint), allOf of
// one schema, minimum, maximum, exclusiveMinimum and exclusiveMaximum (for
// a number: the values in range written without an exponent), the
// string formats date, time, date-time, uuid, ipv4, email, hostname and
// uri (each a subset of the format, so a validator asserting formats
// accepts the output), pattern (the whole string one match of the regular
// expression; pattern.go says which syntax), $ref to any local pointer
// ($defs, definitions, "#"; one that resolves nowhere from the root is
// tried from each enclosing schema, so an embedded schema keeps its own
// $defs), the boolean schemas, and the annotations
// (title, description, default, examples, other formats, …), which
// constrain nothing. Anything else (multipleOf, prefixItems,
// patternProperties, …) is an error.
func SchemaGBNF(schema []byte, name string) (string, error) {
	if name == "" || strings.IndexFunc(name, func(r rune) bool { return r > 127 || !isNameByte(byte(r)) }) >= 0 {
		return "", fmt.Errorf("json schema: rule name %q must be letters, digits, - and _", name)
	}
	doc, err := decodeOrdered(schema)
	if err != nil {
		return "", &SchemaError{Path: "#", Msg: fmt.Sprintf("not valid JSON: %v", err)}
	}
	c := &conv{prefix: name, root: doc, refs: map[any]string{}}
	body, err := c.visit(doc, "#")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s ::= %s\n", name, body)
	for _, r := range c.rules {
		fmt.Fprintf(&b, "%s ::= %s\n", r.name, r.body)
	}
	fmt.Fprintf(&b, jsonPrimitives, name)
	return b.String(), nil
}

// object is a JSON object that keeps its keys' order (property order
// matters: the output follows it).
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered decodes one JSON value: *object, []any, json.Number,
// string, bool or nil.
func decodeOrdered(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the schema")
	}
	return v, nil
}

func decodeValue(d *json.Decoder, depth int) (any, error) {
	if depth > 512 {
		return nil, errors.New("nested too deeply")
	}
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			v, err := decodeValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := o.vals[k]; dup {
				return nil, fmt.Errorf("key %q appears twice", k)
			}
			o.keys = append(o.keys, k)
			o.vals[k] = v
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for d.More() {
			v, err := decodeValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return t, nil
}

// compactJSON writes v as compact JSON (object keys in their order).
func compactJSON(b *strings.Builder, v any) {
	switch x := v.(type) {
	case *object:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			compactJSON(b, k)
			b.WriteByte(':')
			compactJSON(b, x.vals[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			compactJSON(b, e)
		}
		b.WriteByte(']')
	case string:
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		_ = e.Encode(x) // a string always encodes
		b.WriteString(strings.TrimSuffix(buf.String(), "\n"))
	case json.Number:
		b.WriteString(x.String())
	case bool:
		b.WriteString(strconv.FormatBool(x))
	default:
		b.WriteString("null")
	}
}

// Literal is s as a GBNF string literal, for composing grammars around
// SchemaGBNF's rules (a tool call's fixed text around its arguments).
func Literal(s string) string { return literal(s) }

// literal is s as a GBNF string literal.
func literal(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// annotations are keywords that constrain nothing (format is an
// annotation unless a validator opts in to asserting it; the formats of
// stringFormats are followed all the same).
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "format": true,
	"$schema": true, "$id": true, "$comment": true, "$defs": true, "definitions": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "contentMediaType": true, "contentEncoding": true,
}

// typeKeywords are the keywords each type's translation reads.
var typeKeywords = map[string]string{
	"properties": "object", "required": "object", "additionalProperties": "object",
	"items": "array", "minItems": "array", "maxItems": "array",
	"minLength": "string", "maxLength": "string", "pattern": "string",
	"minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number",
}

type conv struct {
	prefix string
	root   any
	rules  []struct{ name, body string }
	refs   map[any]string // the schema referred to (or its pointer) -> rule name
	// scopes are the schema objects enclosing the one being translated,
	// outermost first: where a pointer that resolves nowhere from the
	// root is tried next.
	scopes []*object
}

func (c *conv) prim(p string) string { return c.prefix + "-" + p }

// rule adds a helper rule and returns its name.
func (c *conv) rule(body string) string {
	name := fmt.Sprintf("%s-%d", c.prefix, len(c.rules)+1)
	c.rules = append(c.rules, struct{ name, body string }{name, body})
	return name
}

// visit returns a GBNF expression for the JSON texts valid under s.
func (c *conv) visit(s any, path string) (string, error) {
	switch v := s.(type) {
	case bool:
		if !v {
			return "", &SchemaError{path, "the schema false allows no value"}
		}
		return c.prim("value"), nil
	case *object:
		return c.visitObject(v, path)
	}
	return "", &SchemaError{path, "a schema must be an object or a boolean"}
}

func (c *conv) visitObject(o *object, path string) (string, error) {
	c.scopes = append(c.scopes, o)
	defer func() { c.scopes = c.scopes[:len(c.scopes)-1] }()
	combinators := 0
	for _, k := range o.keys {
		switch {
		case annotations[k] || typeKeywords[k] != "" || k == "type":
		case k == "$ref" || k == "enum" || k == "const" || k == "anyOf" || k == "oneOf" || k == "allOf":
			combinators++
		default:
			return "", &SchemaError{path, fmt.Sprintf("keyword %q is not supported", k)}
		}
	}
	if combinators > 1 {
		return "", &SchemaError{path, "combining $ref, enum, const, anyOf, oneOf and allOf in one schema is not supported"}
	}
	if ref, ok := o.get("$ref"); ok {
		return c.ref(ref, path)
	}
	if v, ok := o.get("const"); ok {
		var b strings.Builder
		compactJSON(&b, v)
		return literal(b.String()), nil
	}
	if v, ok := o.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok || len(vals) == 0 {
			return "", &SchemaError{path + "/enum", "enum must be a non-empty array"}
		}
		alts := make([]string, len(vals))
		for i, x := range vals {
			var b strings.Builder
			compactJSON(&b, x)
			alts[i] = literal(b.String())
		}
		return "( " + strings.Join(alts, " | ") + " )", nil
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		v, ok := o.get(k)
		if !ok {
			continue
		}
		subs, ok := v.([]any)
		if !ok || len(subs) == 0 {
			return "", &SchemaError{path + "/" + k, k + " must be a non-empty array"}
		}
		for _, kk := range o.keys {
			if kk != k && !annotations[kk] {
				return "", &SchemaError{path, fmt.Sprintf("%s beside %q is not supported; move %q into each branch", k, kk, kk)}
			}
		}
		if k == "allOf" {
			if len(subs) != 1 {
				return "", &SchemaError{path + "/allOf", "allOf with more than one schema is not supported"}
			}
			return c.visit(subs[0], path+"/allOf/0")
		}
		alts := make([]string, len(subs))
		for i, sub := range subs {
			e, err := c.visit(sub, fmt.Sprintf("%s/%s/%d", path, k, i))
			if err != nil {
				return "", err
			}
			alts[i] = e
		}
		return "( " + strings.Join(alts, " | ") + " )", nil
	}
	types, err := schemaTypes(o, path)
	if err != nil {
		return "", err
	}
	alts := make([]string, 0, len(types))
	for _, t := range types {
		e, err := c.typed(o, t, path)
		if err != nil {
			return "", err
		}
		alts = append(alts, e)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "( " + strings.Join(alts, " | ") + " )", nil
}

// schemaTypes lists the types a schema allows: its "type", or the one its
// keywords imply, or every type ("value").
func schemaTypes(o *object, path string) ([]string, error) {
	known := map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}
	if v, ok := o.get("type"); ok {
		var ts []string
		switch x := v.(type) {
		case string:
			ts = []string{x}
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, &SchemaError{path + "/type", "type must be a string or an array of strings"}
				}
				ts = append(ts, s)
			}
		default:
			return nil, &SchemaError{path + "/type", "type must be a string or an array of strings"}
		}
		if len(ts) == 0 {
			return nil, &SchemaError{path + "/type", "type must not be empty"}
		}
		for _, t := range ts {
			if !known[t] {
				return nil, &SchemaError{path + "/type", fmt.Sprintf("unknown type %q", t)}
			}
		}
		return ts, nil
	}
	implied := ""
	for _, k := range o.keys {
		if t := typeKeywords[k]; t != "" {
			if implied != "" && implied != t {
				return nil, &SchemaError{path, fmt.Sprintf("keywords of both %s and %s without a type", implied, t)}
			}
			implied = t
		}
	}
	if implied == "" {
		return []string{"value"}, nil
	}
	return []string{implied}, nil
}

// count reads a non-negative integer keyword; -1 when absent.
func count(o *object, k, path string) (int, error) {
	v, ok := o.get(k)
	if !ok {
		return -1, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 64)
	if !isNum || err != nil || i < 0 {
		return 0, &SchemaError{path + "/" + k, k + " must be a non-negative integer"}
	}
	if i > maxRepeat {
		return 0, &SchemaError{path + "/" + k, fmt.Sprintf("%s %d is larger than the supported %d", k, i, maxRepeat)}
	}
	return int(i), nil
}

// repeat is a GBNF repetition suffix for lo..hi copies (hi -1: no bound).
func repeat(lo, hi int) string {
	switch {
	case hi < 0:
		return fmt.Sprintf("{%d,}", lo)
	case lo == hi:
		return fmt.Sprintf("{%d}", lo)
	}
	return fmt.Sprintf("{%d,%d}", lo, hi)
}

// bounds reads a min/max keyword pair.
func bounds(o *object, minK, maxK, path string) (lo, hi int, err error) {
	if lo, err = count(o, minK, path); err != nil {
		return
	}
	if hi, err = count(o, maxK, path); err != nil {
		return
	}
	lo = max(lo, 0)
	if hi >= 0 && hi < lo {
		return 0, 0, &SchemaError{path, fmt.Sprintf("%s %d is below %s %d", maxK, hi, minK, lo)}
	}
	return lo, hi, nil
}

func (c *conv) typed(o *object, t, path string) (string, error) {
	ws := c.prim("ws")
	switch t {
	case "string":
		lo, hi, err := bounds(o, "minLength", "maxLength", path)
		if err != nil {
			return "", err
		}
		if v, ok := o.get("pattern"); ok {
			pat, isStr := v.(string)
			if !isStr {
				return "", &SchemaError{path + "/pattern", "pattern must be a string"}
			}
			if _, hasFormat := o.get("format"); lo > 0 || hi >= 0 || hasFormat {
				return "", &SchemaError{path, "pattern beside minLength, maxLength or format is not supported"}
			}
			e, err := patternGBNF(pat)
			if err != nil {
				return "", &SchemaError{path + "/pattern", err.Error()}
			}
			return c.rule(`"\"" ` + e + ` "\""`), nil
		}
		if f, ok := o.get("format"); ok {
			if body, known := stringFormats[fmt.Sprint(f)]; known {
				if lo > 0 || hi >= 0 {
					return "", &SchemaError{path, fmt.Sprintf("format %q beside minLength or maxLength is not supported", f)}
				}
				return c.rule(`"\"" ` + body + ` "\""`), nil
			}
		}
		if lo == 0 && hi < 0 {
			return c.prim("string"), nil
		}
		return c.rule(fmt.Sprintf(`"\"" %s%s "\""`, c.prim("char"), repeat(lo, hi))), nil
	case "array":
		lo, hi, err := bounds(o, "minItems", "maxItems", path)
		if err != nil {
			return "", err
		}
		item := c.prim("value")
		if v, ok := o.get("items"); ok {
			if item, err = c.visit(v, path+"/items"); err != nil {
				return "", err
			}
		}
		if hi == 0 {
			return c.rule(fmt.Sprintf(`"[" %s "]"`, ws)), nil
		}
		first := fmt.Sprintf("%s %s", item, ws)
		next := fmt.Sprintf(`( "," %s %s %s )`, ws, item, ws)
		restHi := -1
		if hi > 0 {
			restHi = hi - 1
		}
		body := first + " " + next + repeat(max(lo-1, 0), restHi)
		if lo == 0 {
			body = "( " + body + " )?"
		}
		return c.rule(fmt.Sprintf(`"[" %s %s "]"`, ws, body)), nil
	case "object":
		return c.object(o, path)
	case "number", "integer":
		lo, hi, flo, fhi, bounded, err := numBounds(o, path)
		if err != nil {
			return "", err
		}
		if !bounded {
			return c.prim(t), nil
		}
		e := intRange(lo, hi)
		if t == "number" {
			e = numRange(lo, hi, flo, fhi)
		}
		if e == "" {
			return "", &SchemaError{path, fmt.Sprintf("no %s lies within the bounds", t)}
		}
		return c.rule(e), nil
	case "value", "boolean", "null":
		return c.prim(t), nil
	}
	return "", &SchemaError{path + "/type", fmt.Sprintf("unknown type %q", t)}
}

// object translates an object schema: its properties in order, the
// required ones always present, with the commas right whichever optional
// ones appear. a[i] is "properties i.. with none written yet", b[i] the
// same after at least one.
func (c *conv) object(o *object, path string) (string, error) {
	ws := c.prim("ws")
	var props *object
	if v, ok := o.get("properties"); ok {
		p, isObj := v.(*object)
		if !isObj {
			return "", &SchemaError{path + "/properties", "properties must be an object"}
		}
		props = p
	}
	required := map[string]bool{}
	if v, ok := o.get("required"); ok {
		list, isArr := v.([]any)
		if !isArr {
			return "", &SchemaError{path + "/required", "required must be an array of property names"}
		}
		for _, e := range list {
			s, isStr := e.(string)
			if !isStr {
				return "", &SchemaError{path + "/required", "required must be an array of property names"}
			}
			if props == nil || props.vals == nil || !has(props, s) {
				return "", &SchemaError{path + "/required", fmt.Sprintf("required property %q is not among the properties", s)}
			}
			required[s] = true
		}
	}
	if props == nil || len(props.keys) == 0 {
		add, ok := o.get("additionalProperties")
		switch x := add.(type) {
		case bool:
			if !x {
				return c.rule(fmt.Sprintf(`"{" %s "}"`, ws)), nil
			}
		case *object:
			val, err := c.visit(x, path+"/additionalProperties")
			if err != nil {
				return "", err
			}
			kv := fmt.Sprintf(`%s %s ":" %s %s %s`, c.prim("string"), ws, ws, val, ws)
			return c.rule(fmt.Sprintf(`"{" %s ( %s ( "," %s %s )* )? "}"`, ws, kv, ws, kv)), nil
		default:
			if ok {
				return "", &SchemaError{path + "/additionalProperties", "additionalProperties must be a boolean or a schema"}
			}
		}
		return c.prim("object"), nil
	}
	if add, ok := o.get("additionalProperties"); ok {
		if _, isBool := add.(bool); !isBool {
			if _, isObj := add.(*object); !isObj {
				return "", &SchemaError{path + "/additionalProperties", "additionalProperties must be a boolean or a schema"}
			}
		}
	}
	n := len(props.keys)
	a := make([]string, n+1)
	b := make([]string, n+1)
	a[n], b[n] = `""`, `""`
	for i := n - 1; i >= 0; i-- {
		k := props.keys[i]
		val, err := c.visit(props.vals[k], path+"/properties/"+escapePointer(k))
		if err != nil {
			return "", err
		}
		var key strings.Builder
		compactJSON(&key, k)
		kv := fmt.Sprintf(`%s %s ":" %s %s %s`, literal(key.String()), ws, ws, val, ws)
		if required[k] {
			a[i] = c.rule(fmt.Sprintf("%s %s", kv, b[i+1]))
			b[i] = c.rule(fmt.Sprintf(`"," %s %s %s`, ws, kv, b[i+1]))
		} else {
			a[i] = c.rule(fmt.Sprintf("%s %s | %s", kv, b[i+1], a[i+1]))
			b[i] = c.rule(fmt.Sprintf(`"," %s %s %s | %s`, ws, kv, b[i+1], b[i+1]))
		}
	}
	return c.rule(fmt.Sprintf(`"{" %s %s "}"`, ws, a[0])), nil
}

func has(o *object, k string) bool {
	_, ok := o.vals[k]
	return ok
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// ref resolves a local $ref ("#", "#/$defs/x", any JSON pointer) to a
// rule of its own, so that recursive schemas become recursive rules.
func (c *conv) ref(v any, path string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", &SchemaError{path + "/$ref", "$ref must be a string"}
	}
	frag, isLocal := strings.CutPrefix(s, "#")
	if !isLocal {
		return "", &SchemaError{path + "/$ref", fmt.Sprintf("$ref %q is not a local reference (#/…); remote schemas are not fetched", s)}
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return "", &SchemaError{path + "/$ref", fmt.Sprintf("$ref %q is not a valid pointer", s)}
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return "", &SchemaError{path + "/$ref", fmt.Sprintf("$ref %q: anchors are not supported, only JSON pointers", s)}
	}
	// From the document's root, as the standard says; failing that, from
	// each enclosing schema, innermost first, so that a schema embedded
	// in another (a tool's parameters inside a call's schema) keeps its
	// own #/$defs references.
	target, found := resolvePointer(c.root, frag)
	for i := len(c.scopes) - 1; !found && i >= 0; i-- {
		target, found = resolvePointer(c.scopes[i], frag)
	}
	if !found {
		return "", &SchemaError{path + "/$ref", fmt.Sprintf("$ref %q points at nothing", s)}
	}
	key := any(s)
	if o, isObj := target.(*object); isObj {
		key = o // the same pointer may name different schemas in different scopes
	}
	if name, done := c.refs[key]; done {
		return name, nil
	}
	// Reserve the rule before visiting, so a reference back to it (a
	// recursive schema) finds it.
	name := c.rule("")
	c.refs[key] = name
	body, err := c.visit(target, s)
	if err != nil {
		return "", err
	}
	for i := range c.rules {
		if c.rules[i].name == name {
			c.rules[i].body = body
		}
	}
	return name, nil
}

// resolvePointer follows a JSON pointer ("" or "/a/b") from doc.
func resolvePointer(doc any, frag string) (any, bool) {
	if frag == "" {
		return doc, true
	}
	target := doc
	for _, part := range strings.Split(frag[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		ok := false
		switch x := target.(type) {
		case *object:
			target, ok = x.vals[part]
		case []any:
			i, err := strconv.Atoi(part)
			if ok = err == nil && i >= 0 && i < len(x); ok {
				target = x[i]
			}
		}
		if !ok {
			return nil, false
		}
	}
	return target, true
}

// stringFormats are the string formats the output follows (the text
// between the quotes), each a subset of what the format allows, so that
// a validator asserting formats accepts every output: dates stop at the
// 28th in February, times at second 59.
var stringFormats = func() map[string]string {
	const (
		date  = `[0-9]{4} "-" ( ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) | ( "0" [13-9] | "1" [0-2] ) "-" ( "29" | "30" ) | ( "0" [13578] | "1" [02] ) "-31" )`
		clock = `( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )?`
		zone  = `( [Zz] | [-+] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`
		hex   = `[0-9a-fA-F]`
		octet = `( "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9] )`
		label = `[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,20} [a-zA-Z0-9] )?`
	)
	return map[string]string{
		"date":      date,
		"time":      clock + " " + zone,
		"date-time": date + ` [Tt] ` + clock + " " + zone,
		"uuid":      fmt.Sprintf(`%[1]s{8} "-" %[1]s{4} "-" %[1]s{4} "-" %[1]s{4} "-" %[1]s{12}`, hex),
		"hostname":  label + ` ( "." ` + label + ` ){0,3}`,
		"uri":       `[a-z] [a-z0-9+.-]{0,10} "://" ` + label + ` ( "." ` + label + ` ){0,3} ( "/" [a-zA-Z0-9._~!$&'()*+,;=:@-]{0,30} ){0,8}`,
		"ipv4":      octet + ` "." ` + octet + ` "." ` + octet + ` "." ` + octet,
		"email":     `[a-zA-Z0-9_+-]{1,16} ( "." [a-zA-Z0-9_+-]{1,16} ){0,3} "@" ` + label + ` ( "." ` + label + ` ){0,2} "." [a-zA-Z]{2,10}`,
	}
}()
