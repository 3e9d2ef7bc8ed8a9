package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// Limits that keep a hostile or runaway grammar from taking the daemon's
// memory: a step may keep at most maxStacks parses alive, a Matcher may
// meet at most maxStates states, and cached masks are dropped (to be
// computed again when needed) beyond maxMaskBytes.
const (
	maxStacks    = 4096
	maxExpand    = 1 << 16
	maxStates    = 1 << 17
	maxMaskBytes = 128 << 20
)

// ErrAmbiguous is returned when a grammar keeps more than maxStacks
// parses alive at once, or one character's step has to expand more than
// maxExpand stack frames (nested repetitions of optional parts).
var ErrAmbiguous = errors.New("grammar is too ambiguous: too many parses alive at once")

// ErrTooManyStates is returned when a Matcher has met maxStates states.
var ErrTooManyStates = errors.New("grammar matcher has met too many states")

// State is a Matcher's state: where generation stands in the grammar. The
// zero State is dead (nothing can follow).
type State uint32

// Dead is the state after a byte the grammar does not allow.
const Dead State = 0

// stackNode is one frame of a parse stack: a grammar position (never an
// elEnd) and the frame below it (0: the bottom).
type stackNode struct {
	pos    int32
	parent uint32
}

// partial is a UTF-8 character read in part: its bits so far, the bytes
// still to come and its total length.
type partial struct {
	val    uint32
	rem, n uint8
}

type stateInfo struct {
	stacks []uint32 // sorted top nodes; 0 is the empty stack (accept)
	part   partial
	accept bool
	mask   []uint64 // nil until computed
	nText  int      // text tokens the mask allows
}

// Matcher runs a Grammar over a Vocab. It is safe for concurrent use
// (one lock; a decode step holds it for a table walk over a token's
// bytes) and meant to be shared by every request with the same grammar,
// so that the masks computed for one request serve the next.
type Matcher struct {
	g *Grammar
	v *Vocab

	mu        sync.Mutex
	nodes     []stackNode
	nodeIDs   map[stackNode]uint32
	states    []stateInfo
	stateIDs  map[string]uint32
	trans     []uint32 // states*256: next state + 1, 0 unknown
	maskBytes int
	// stateBytes is what the states and their interning keys hold.
	stateBytes int
	start      State
	seen       map[uint32]bool
	key        []byte
}

// NewMatcher prepares g to run over v.
func NewMatcher(g *Grammar, v *Vocab) (*Matcher, error) {
	m := &Matcher{g: g, v: v, nodes: make([]stackNode, 1), nodeIDs: map[stackNode]uint32{},
		stateIDs: map[string]uint32{}, seen: map[uint32]bool{}}
	m.states = append(m.states, stateInfo{}) // Dead
	m.trans = make([]uint32, 256)
	clear(m.seen)
	var stacks []uint32
	var err error
	for _, a := range g.alts[g.root] {
		if stacks, err = m.expand(m.cont(a, 0), stacks); err != nil {
			return nil, err
		}
	}
	s, err := m.intern(stacks, partial{})
	if err != nil {
		return nil, err
	}
	m.start = s
	return m, nil
}

// Start is the state before any output.
func (m *Matcher) Start() State { return m.start }

// Vocab is the vocabulary m runs over.
func (m *Matcher) Vocab() *Vocab { return m.v }

// States is the number of states met so far.
func (m *Matcher) States() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.states)
}

// Bytes is roughly the memory m holds: transition table, cached masks,
// states and stack frames (the shared Vocab not counted), so that a
// cache of Matchers can keep to a budget.
func (m *Matcher) Bytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.trans)*4 + m.maskBytes + len(m.nodes)*24 + m.stateBytes
}

func (m *Matcher) intern(stacks []uint32, p partial) (State, error) {
	if len(stacks) == 0 {
		return Dead, nil
	}
	slices.Sort(stacks)
	stacks = slices.Compact(stacks)
	k := m.key[:0]
	for _, s := range stacks {
		k = binary.LittleEndian.AppendUint32(k, s)
	}
	k = binary.LittleEndian.AppendUint32(k, p.val)
	k = append(k, p.rem, p.n)
	m.key = k
	if id, ok := m.stateIDs[string(k)]; ok {
		return State(id), nil
	}
	if len(m.states) >= maxStates {
		return Dead, ErrTooManyStates
	}
	id := uint32(len(m.states))
	m.stateIDs[string(k)] = id
	m.states = append(m.states, stateInfo{stacks: slices.Clone(stacks), part: p, accept: stacks[0] == 0 && p.rem == 0})
	m.stateBytes += 96 + len(stacks)*4 + len(k)
	m.trans = append(m.trans, make([]uint32, 256)...)
	return State(id), nil
}

// node interns the frame (pos, parent).
func (m *Matcher) node(pos int32, parent uint32) uint32 {
	k := stackNode{pos, parent}
	if id, ok := m.nodeIDs[k]; ok {
		return id
	}
	id := uint32(len(m.nodes))
	m.nodes = append(m.nodes, k)
	m.nodeIDs[k] = id
	return id
}

// cont is the stack that goes on at pos above parent: a frame at pos, or
// parent itself when pos ends its alternative (the rule is complete).
func (m *Matcher) cont(pos int32, parent uint32) uint32 {
	if m.g.elems[pos].kind == elEnd {
		return parent
	}
	return m.node(pos, parent)
}

// expand appends to out the stacks that node's stack stands for once
// every rule reference on top is replaced by its alternatives: stacks
// whose top reads a character, and 0 where the whole input may end.
func (m *Matcher) expand(node uint32, out []uint32) ([]uint32, error) {
	if m.seen[node] {
		return out, nil
	}
	m.seen[node] = true
	if len(m.seen) > maxExpand {
		return out, ErrAmbiguous
	}
	if node == 0 {
		return append(out, 0), nil
	}
	n := m.nodes[node]
	e := &m.g.elems[n.pos]
	if e.kind == elChars {
		if len(out) >= maxStacks {
			return out, ErrAmbiguous
		}
		return append(out, node), nil
	}
	next := m.cont(n.pos+1, n.parent)
	var err error
	for _, a := range m.g.alts[e.ref] {
		if out, err = m.expand(m.cont(a, next), out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// advance returns the stacks that read code point c from stacks.
func (m *Matcher) advance(stacks []uint32, c rune) ([]uint32, error) {
	clear(m.seen)
	var out []uint32
	var err error
	for _, s := range stacks {
		if s == 0 {
			continue
		}
		n := m.nodes[s]
		if m.g.elems[n.pos].matches(c) {
			if out, err = m.expand(m.cont(n.pos+1, n.parent), out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// minRune is the smallest code point a UTF-8 sequence of n bytes may
// encode (shorter forms are overlong, not UTF-8).
var minRune = [5]uint32{0, 0, 0x80, 0x800, 0x10000}

// step is the state after byte b in state s (Dead when b is not
// allowed). Callers hold m.mu.
func (m *Matcher) step(s State, b byte) (State, error) {
	t := &m.trans[int(s)*256+int(b)]
	if *t != 0 {
		return State(*t - 1), nil
	}
	ns, err := m.compute(s, b)
	if err != nil {
		return Dead, err
	}
	m.trans[int(s)*256+int(b)] = uint32(ns) + 1 // intern may have grown m.trans
	return ns, nil
}

func (m *Matcher) compute(s State, b byte) (State, error) {
	if s == Dead {
		return Dead, nil
	}
	st := &m.states[s]
	stacks, p := st.stacks, st.part
	if p.rem == 0 {
		switch {
		case b < 0x80:
			out, err := m.advance(stacks, rune(b))
			if err != nil {
				return Dead, err
			}
			return m.intern(out, partial{})
		case b&0xE0 == 0xC0:
			p = partial{uint32(b & 0x1F), 1, 2}
		case b&0xF0 == 0xE0:
			p = partial{uint32(b & 0x0F), 2, 3}
		case b&0xF8 == 0xF0:
			p = partial{uint32(b & 0x07), 3, 4}
		default:
			return Dead, nil
		}
	} else {
		if b&0xC0 != 0x80 {
			return Dead, nil
		}
		p.val = p.val<<6 | uint32(b&0x3F)
		p.rem--
		if p.rem == 0 {
			c := p.val
			if c < minRune[p.n] || c > maxRune || c >= 0xD800 && c <= 0xDFFF {
				return Dead, nil
			}
			out, err := m.advance(stacks, rune(c))
			if err != nil {
				return Dead, err
			}
			return m.intern(out, partial{})
		}
	}
	// A character still being read: alive if some stack could take one
	// of the code points it may turn out to be.
	shift := 6 * uint32(p.rem)
	lo := max(p.val<<shift, minRune[p.n])
	hi := min(p.val<<shift|(1<<shift-1), maxRune)
	if lo > hi || !m.couldRead(stacks, lo, hi) { // only overlong forms or beyond U+10FFFF left
		return Dead, nil
	}
	return m.intern(slices.Clone(stacks), p)
}

// couldRead reports whether a stack reads some scalar value in [lo, hi].
func (m *Matcher) couldRead(stacks []uint32, lo, hi uint32) bool {
	for _, s := range stacks {
		if s == 0 {
			continue
		}
		e := &m.g.elems[m.nodes[s].pos]
		if lo < 0xD800 && e.overlaps(rune(lo), rune(min(hi, 0xD7FF))) ||
			hi > 0xDFFF && e.overlaps(rune(max(lo, 0xE000)), rune(hi)) {
			return true
		}
	}
	return false
}

// Accepting reports whether the output so far is a complete sentence of
// the grammar.
func (m *Matcher) Accepting(s State) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[s].accept
}

// AdvanceBytes reads text from state s and returns the state after it
// (Dead when the grammar does not allow it).
func (m *Matcher) AdvanceBytes(s State, text []byte) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	for _, b := range text {
		if s, err = m.step(s, b); err != nil || s == Dead {
			return Dead, err
		}
	}
	return s, nil
}

// Accept returns the state after token tok in state s. An
// end-of-generation token is accepted only where the grammar accepts,
// and leaves the state as it was; a token the grammar does not allow is
// an error.
func (m *Matcher) Accept(s State, tok int32) (State, error) {
	if tok < 0 || int(tok) >= m.v.n {
		return Dead, fmt.Errorf("token %d is outside the vocabulary (0..%d)", tok, m.v.n-1)
	}
	if slices.Contains(m.v.eog, tok) {
		if !m.Accepting(s) {
			return Dead, fmt.Errorf("end of generation before the grammar is complete")
		}
		return s, nil
	}
	p := m.v.pieces[tok]
	if len(p) == 0 {
		return Dead, fmt.Errorf("token %d produces no text and is never allowed under a grammar", tok)
	}
	ns, err := m.AdvanceBytes(s, p)
	if err != nil {
		return Dead, err
	}
	if ns == Dead {
		return Dead, fmt.Errorf("token %d (%q) is not allowed by the grammar here", tok, p)
	}
	return ns, nil
}

// Mask is a token bitset: bit i set when token i is allowed.
type Mask []uint64

// Has reports whether token id is allowed.
func (k Mask) Has(id int32) bool {
	return id >= 0 && int(id)>>6 < len(k) && k[id>>6]&(1<<(uint(id)&63)) != 0
}

// Count is the number of tokens allowed.
func (k Mask) Count() int {
	n := 0
	for _, w := range k {
		n += bits.OnesCount64(w)
	}
	return n
}

// Apply sets every logit of a token k does not allow to -Inf, so any
// sampler picks only allowed tokens. Logits past the vocabulary (a
// model's padded output rows) are never allowed.
func (k Mask) Apply(logits []float32) {
	inf := float32(math.Inf(-1))
	for i := len(k) * 64; i < len(logits); i++ {
		logits[i] = inf
	}
	for w, word := range k {
		base := w << 6
		switch {
		case word == math.MaxUint64:
		case word == 0 && base+64 <= len(logits):
			row := logits[base : base+64]
			for i := range row {
				row[i] = inf
			}
		default:
			for z := ^word; z != 0; z &= z - 1 {
				i := base + bits.TrailingZeros64(z)
				if i >= len(logits) {
					break
				}
				logits[i] = inf
			}
		}
	}
}

// Allowed returns the mask of tokens that may come next in state s,
// computed on the state's first visit and kept. The Mask is shared: do
// not modify it.
func (m *Matcher) Allowed(s State) (Mask, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allowed(s)
}

// Done reports whether the grammar is complete in state s and nothing
// but the end of generation may follow: generation can stop without
// asking the model.
func (m *Matcher) Done(s State) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.states[s].accept {
		return false, nil
	}
	if _, err := m.allowed(s); err != nil {
		return false, err
	}
	return m.states[s].nText == 0, nil
}

func (m *Matcher) allowed(s State) (Mask, error) {
	if k := m.states[s].mask; k != nil {
		return k, nil
	}
	v := m.v
	k := make(Mask, (v.n+63)/64)
	nText := 0
	if s != Dead {
		at := make([]State, v.maxDepth+1)
		at[0] = s
		// The transition lookup is written out here (step on a miss
		// only): this loop visits most of the trie's nodes.
		trans := m.trans
		nodeByte, nodeDepth, nodeSkip, tokStart, toks := v.nodeByte, v.nodeDepth, v.nodeSkip, v.tokStart, v.toks
		for i := 0; i < len(nodeByte); {
			d := int(nodeDepth[i])
			cur := at[d-1]
			var ns State
			if t := trans[int(cur)<<8|int(nodeByte[i])]; t != 0 {
				ns = State(t - 1)
			} else {
				var err error
				if ns, err = m.step(cur, nodeByte[i]); err != nil {
					return nil, err
				}
				trans = m.trans // step may have grown it
			}
			if ns == Dead {
				i = int(nodeSkip[i])
				continue
			}
			at[d] = ns
			for _, id := range toks[tokStart[i]:tokStart[i+1]] {
				k[id>>6] |= 1 << (uint(id) & 63)
			}
			nText += int(tokStart[i+1] - tokStart[i])
			i++
		}
		if m.states[s].accept {
			for _, id := range v.eog {
				k[id>>6] |= 1 << (uint(id) & 63)
			}
		}
	}
	if m.maskBytes+len(k)*8 > maxMaskBytes {
		for i := range m.states {
			m.states[i].mask = nil
		}
		m.maskBytes = 0
	}
	m.maskBytes += len(k) * 8
	m.states[s].mask, m.states[s].nText = k, nText
	return k, nil
}
