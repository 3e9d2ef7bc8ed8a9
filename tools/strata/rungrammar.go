package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/strata-llm/strata/engine/grammar"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// runGrammar reads `strata run`'s constraint flags: a GBNF grammar file,
// or a JSON Schema given inline or as @FILE. A grammar or schema that does
// not translate is a usage error, found before the model opens; a file
// that is not there is one too (exit 5).
func runGrammar(grammarFile, schema string) (*grammar.Grammar, error) {
	switch {
	case grammarFile != "" && schema != "":
		return nil, usagef("--grammar-file and --json-schema both constrain the output; give one")
	case grammarFile != "":
		b, err := os.ReadFile(grammarFile)
		if err != nil {
			return nil, fmt.Errorf("--grammar-file: %w", err)
		}
		g, err := grammar.Parse(string(b))
		if err != nil {
			return nil, usagef("--grammar-file %s: %v", grammarFile, err)
		}
		return g, nil
	case schema != "":
		text := []byte(schema)
		if name, ok := strings.CutPrefix(schema, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, fmt.Errorf("--json-schema: %w", err)
			}
			text = b
		}
		g, err := grammar.FromJSONSchema(text)
		if err != nil {
			return nil, usagef("--json-schema: %v", err)
		}
		return g, nil
	}
	return nil, nil
}

// runMatcher runs g over the model's vocabulary (nil g: no constraint).
func runMatcher(g *grammar.Grammar, tok *tokenizer.Tokenizer) (*grammar.Matcher, error) {
	if g == nil {
		return nil, nil
	}
	v, err := grammar.VocabFromTokenizer(tok)
	if err != nil {
		return nil, fmt.Errorf("constrained output: %w", err)
	}
	m, err := grammar.NewMatcher(g, v)
	if err != nil {
		return nil, fmt.Errorf("constrained output: %w", err)
	}
	return m, nil
}
