package daemon

import (
	"errors"
	"fmt"
	"sync"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine/grammar"
)

// Matchers kept per model and the memory they may hold together; the
// least recently used go first, and one that has grown past the budget
// on its own is replaced by a fresh one for new requests (requests in
// flight keep theirs).
const (
	maxMatchers     = 32
	maxMatcherBytes = 512 << 20
)

// grammars holds a model's grammar vocabulary, built on the first
// constrained request, and the Matchers of recent grammars, so that a
// schema's token masks, computed once, serve every later request with the
// same schema.
type grammars struct {
	once     sync.Once
	vocab    *grammar.Vocab
	vocabErr error

	mu       sync.Mutex
	matchers map[string]*grammar.Matcher
	order    []string // least recently used first
}

// constraintMatcher returns the model's Matcher for what a request's
// output must follow. A grammar or schema that does not translate is a
// 400 naming the field it came in.
func (lm *loaded) constraintMatcher(c *openai.Constraint) (*grammar.Matcher, error) {
	key := c.Kind + "\x00" + c.Text + string(c.Schema)
	if m := lm.cachedMatcher(key); m != nil {
		return m, nil
	}
	var g *grammar.Grammar
	var err error
	switch c.Kind {
	case openai.ConstraintGrammar:
		if g, err = grammar.Parse(c.Text); err != nil {
			return nil, openai.BadRequest(c.Param, "invalid grammar: %v", err)
		}
	case openai.ConstraintJSONObject:
		if g, err = grammar.JSONObject(); err != nil {
			return nil, openai.AsError(fmt.Errorf("the built-in JSON grammar: %w", err))
		}
	case openai.ConstraintJSONSchema:
		if g, err = grammar.FromJSONSchema(c.Schema); err != nil {
			var se *grammar.SchemaError
			if errors.As(err, &se) {
				return nil, openai.BadRequest(c.Param, "unsupported or invalid schema at %s: %s", se.Path, se.Msg)
			}
			return nil, openai.BadRequest(c.Param, "invalid schema: %v", err)
		}
	default:
		return nil, openai.AsError(fmt.Errorf("unknown constraint kind %q", c.Kind))
	}
	m, err := lm.matcherFor(key, g)
	if err != nil {
		return nil, openai.BadRequest(c.Param, "constrained output: %v", err)
	}
	return m, nil
}

// cachedMatcher is the Matcher kept under key, if any and within budget.
func (lm *loaded) cachedMatcher(key string) *grammar.Matcher {
	gs := &lm.grammars
	gs.mu.Lock()
	defer gs.mu.Unlock()
	m, ok := gs.matchers[key]
	if !ok || m.Bytes() >= maxMatcherBytes {
		return nil
	}
	gs.touch(key)
	return m
}

// touch moves key to the most recently used end. Callers hold gs.mu.
func (gs *grammars) touch(key string) {
	for i, k := range gs.order {
		if k == key {
			gs.order = append(append(gs.order[:i:i], gs.order[i+1:]...), key)
			return
		}
	}
}

// matcher returns the model's Matcher for g, kept under g's text.
func (lm *loaded) matcher(g *grammar.Grammar) (*grammar.Matcher, error) {
	return lm.matcherFor(g.String(), g)
}

// matcherFor returns the Matcher kept under key, or makes one for g.
func (lm *loaded) matcherFor(key string, g *grammar.Grammar) (*grammar.Matcher, error) {
	gs := &lm.grammars
	gs.once.Do(func() { gs.vocab, gs.vocabErr = grammar.VocabFromTokenizer(lm.eng.Tok) })
	if gs.vocabErr != nil {
		return nil, fmt.Errorf("the model's vocabulary for constrained output: %w", gs.vocabErr)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.matchers == nil {
		gs.matchers = map[string]*grammar.Matcher{}
	}
	gs.touch(key)
	if m, ok := gs.matchers[key]; ok && m.Bytes() < maxMatcherBytes {
		return m, nil
	}
	m, err := grammar.NewMatcher(g, gs.vocab)
	if err != nil {
		return nil, err
	}
	if _, ok := gs.matchers[key]; !ok {
		gs.order = append(gs.order, key)
	}
	gs.matchers[key] = m
	for len(gs.order) > 1 && (len(gs.order) > maxMatchers || gs.bytes() > maxMatcherBytes) {
		delete(gs.matchers, gs.order[0])
		gs.order = gs.order[1:]
	}
	return m, nil
}

// bytes is the memory the cached Matchers hold. Callers hold gs.mu.
func (gs *grammars) bytes() int {
	n := 0
	for _, m := range gs.matchers {
		n += m.Bytes()
	}
	return n
}

// constrainJobSchema constrains j's output to JSON valid under schema,
// for requests that must answer with a tool call; it has the shape of the
// server's constrainSchema hook. A schema that does not translate is a
// 400 naming "tools".
func (s *Server) constrainJobSchema(j *job, schema []byte) error {
	m, err := j.lm.constraintMatcher(&openai.Constraint{Kind: openai.ConstraintJSONSchema, Schema: schema, Param: "tools"})
	if err != nil {
		return err
	}
	j.req.Grammar = m
	return nil
}
