package daemon

import (
	"fmt"
	"sync"

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

// matcher returns the model's Matcher for g.
func (lm *loaded) matcher(g *grammar.Grammar) (*grammar.Matcher, error) {
	gs := &lm.grammars
	gs.once.Do(func() { gs.vocab, gs.vocabErr = grammar.VocabFromTokenizer(lm.eng.Tok) })
	if gs.vocabErr != nil {
		return nil, fmt.Errorf("the model's vocabulary for constrained output: %w", gs.vocabErr)
	}
	key := g.String()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.matchers == nil {
		gs.matchers = map[string]*grammar.Matcher{}
	}
	for i, k := range gs.order {
		if k == key {
			gs.order = append(append(gs.order[:i:i], gs.order[i+1:]...), key)
			break
		}
	}
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
