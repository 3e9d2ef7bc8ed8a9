package toolcall

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParser: no output makes the parsers fail; however the text is cut
// into pieces, the stream says what Parse says whenever Parse finds calls
// (and, when it finds none, gives back the text whole); the calls Parse
// keeps have JSON-object arguments.
func FuzzParser(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(uint8(tc.f), tc.text, uint8(3))
	}
	f.Fuzz(func(t *testing.T, fam uint8, text string, cut uint8) {
		family := Family(fam % 4)
		content, calls := Parse(family, text, seqIDs())
		for _, c := range calls {
			var obj map[string]json.RawMessage
			if c.Name == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
				t.Fatalf("Parse kept call %+v", c)
			}
		}
		if calls == nil && content != text {
			t.Fatalf("no calls, but content %q is not the text %q", content, text)
		}
		n := int(cut%16) + 1
		p := NewParser(family, seqIDs())
		var b strings.Builder
		var ds []Delta
		for i := 0; i < len(text); i += n {
			ds = append(ds, p.Feed(text[i:min(i+n, len(text))])...)
		}
		ds = append(ds, p.Close()...)
		for _, d := range ds {
			b.WriteString(d.Content)
		}
		if calls == nil && len(p.Calls()) == 0 && b.String() != text {
			t.Fatalf("pieces of %d: no calls, but content %q is not the text %q", n, b.String(), text)
		}
		if calls != nil && (b.String() != content || !reflect.DeepEqual(p.Calls(), calls)) {
			t.Fatalf("pieces of %d: content %q calls %+v; Parse: %q %+v", n, b.String(), p.Calls(), content, calls)
		}
	})
}
