package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// maxRune is the largest Unicode code point.
const maxRune = 0x10FFFF

// maxElems bounds a lowered grammar (every {m,n} unit, every literal
// character is an element): a grammar beyond it is refused, not built.
const maxElems = 1 << 20

// rng is an inclusive range of code points.
type rng struct{ lo, hi rune }

// normalize sorts ranges and merges those that overlap or touch.
func normalize(set []rng) []rng {
	set = slices.Clone(set)
	slices.SortFunc(set, func(a, b rng) int { return int(a.lo) - int(b.lo) })
	out := set[:0]
	for _, r := range set {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement returns the code points a normalized set lacks.
func complement(set []rng) []rng {
	var out []rng
	next := rune(0)
	for _, r := range set {
		if r.lo > next {
			out = append(out, rng{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= maxRune {
		out = append(out, rng{next, maxRune})
	}
	return out
}

// elemKind is what a grammar position holds.
type elemKind uint8

const (
	elChars elemKind = iota // one code point from set
	elRef                   // the rule ref
	elEnd                   // the end of an alternative
)

type elem struct {
	kind elemKind
	ref  int32
	set  []rng
}

// matches reports whether code point c is in e's set.
func (e *elem) matches(c rune) bool {
	for _, r := range e.set {
		if c < r.lo {
			return false
		}
		if c <= r.hi {
			return true
		}
	}
	return false
}

// overlaps reports whether any code point in [lo, hi] is in e's set.
func (e *elem) overlaps(lo, hi rune) bool {
	for _, r := range e.set {
		if r.lo <= hi && lo <= r.hi {
			return true
		}
	}
	return false
}

// Grammar is a parsed, lowered grammar. It is immutable and safe for
// concurrent use; a Matcher runs it over a vocabulary.
type Grammar struct {
	// elems holds every alternative's elements, each alternative ended
	// by an elEnd; a position is an index into it.
	elems []elem
	// alts[r] are the start positions of rule r's alternatives.
	alts  [][]int32
	names []string
	// owner[r] is the rule a helper rule was made for (r itself for the
	// rules the grammar names).
	owner []int32
	root  int32
	src   string
}

// String returns the grammar's GBNF text (for a JSON Schema, the
// translation).
func (g *Grammar) String() string { return g.src }

// Rules is the number of rules after lowering (helper rules included).
func (g *Grammar) Rules() int { return len(g.alts) }

// lowerer turns parsed rule bodies into flat rules: groups with several
// alternatives and repetitions become helper rules named after the rule
// they appear in.
type lowerer struct {
	ids   map[string]int32
	names []string
	owner []int32
	rules [][][]elem
	size  int
	lines map[string]int
}

// newRule adds a rule; owner is the named rule a helper rule is made
// for, -1 for a named rule.
func (l *lowerer) newRule(name string, owner int32) int32 {
	id := int32(len(l.rules))
	if owner < 0 {
		owner = id
	}
	l.names = append(l.names, name)
	l.owner = append(l.owner, owner)
	l.rules = append(l.rules, nil)
	return id
}

// helper adds a helper rule for the named rule owner.
func (l *lowerer) helper(owner string) int32 {
	return l.newRule(fmt.Sprintf("%s-%d", owner, len(l.rules)), l.ids[owner])
}

func (l *lowerer) add(n int) error {
	l.size += n
	if l.size > maxElems {
		return fmt.Errorf("grammar is too large: more than %d elements after expanding repetitions", maxElems)
	}
	return nil
}

func lower(names []string, bodies map[string]*expr, lines map[string]int) (*Grammar, error) {
	l := &lowerer{ids: map[string]int32{}, lines: lines}
	for _, n := range names {
		l.ids[n] = l.newRule(n, -1)
	}
	for _, n := range names {
		alts, err := l.alternatives(bodies[n], n)
		if err != nil {
			return nil, err
		}
		l.rules[l.ids[n]] = alts
	}
	g := &Grammar{names: l.names, owner: l.owner, root: l.ids["root"], alts: make([][]int32, len(l.rules))}
	for r, alts := range l.rules {
		for _, a := range alts {
			g.alts[r] = append(g.alts[r], int32(len(g.elems)))
			g.elems = append(g.elems, a...)
			g.elems = append(g.elems, elem{kind: elEnd})
		}
	}
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	if err := g.checkProductive(); err != nil {
		return nil, err
	}
	// The start state needs no vocabulary: building it here refuses a
	// grammar too ambiguous to start with its parse error, not later.
	if _, err := NewMatcher(g, &Vocab{}); err != nil {
		return nil, err
	}
	return g, nil
}

func (l *lowerer) alternatives(e *expr, owner string) ([][]elem, error) {
	var out [][]elem
	for _, seq := range e.alts {
		var s []elem
		for _, it := range seq {
			es, err := l.item(it, owner)
			if err != nil {
				return nil, err
			}
			s = append(s, es...)
		}
		out = append(out, s)
	}
	return out, nil
}

func (l *lowerer) item(e *expr, owner string) ([]elem, error) {
	switch e.kind {
	case exLit:
		out := make([]elem, len(e.runes))
		for i, r := range e.runes {
			out[i] = elem{kind: elChars, set: []rng{{r, r}}}
		}
		return out, l.add(len(out))
	case exClass:
		return []elem{{kind: elChars, set: e.set}}, l.add(1)
	case exRef:
		id, ok := l.ids[e.name]
		if !ok {
			return nil, &SyntaxError{Line: e.line, Msg: fmt.Sprintf("rule %q is used in %q but never defined", e.name, owner)}
		}
		return []elem{{kind: elRef, ref: id}}, l.add(1)
	case exAlt:
		alts, err := l.alternatives(e, owner)
		if err != nil {
			return nil, err
		}
		if len(alts) == 1 {
			return alts[0], nil
		}
		id := l.helper(owner)
		l.rules[id] = alts
		return []elem{{kind: elRef, ref: id}}, l.add(1)
	}
	// exRep: min copies, then a star rule or a chain of optionals.
	sub, err := l.item(e.sub, owner)
	if err != nil || len(sub) == 0 {
		return nil, err
	}
	var out []elem
	for range e.min {
		out = append(out, sub...)
		if err := l.add(len(sub)); err != nil {
			return nil, err
		}
	}
	if e.max < 0 {
		id := l.helper(owner)
		l.rules[id] = [][]elem{append(slices.Clone(sub), elem{kind: elRef, ref: id}), nil}
		return append(out, elem{kind: elRef, ref: id}), l.add(len(sub) + 2)
	}
	// opt_1 ::= sub | ε; opt_k ::= sub opt_{k-1} | ε.
	var prev int32 = -1
	for range e.max - e.min {
		id := l.helper(owner)
		a := slices.Clone(sub)
		if prev >= 0 {
			a = append(a, elem{kind: elRef, ref: prev})
		}
		l.rules[id] = [][]elem{a, nil}
		prev = id
		if err := l.add(len(a) + 1); err != nil {
			return nil, err
		}
	}
	if prev >= 0 {
		out = append(out, elem{kind: elRef, ref: prev})
	}
	return out, nil
}

// leftEdge is a rule a rule may start with; grows marks a reference that
// something follows in its alternative (expanding it adds a frame).
type leftEdge struct {
	to    int32
	grows bool
}

// checkLeftRecursion refuses a rule that can reach itself without
// reading a character through a reference that something follows:
// expanding it would stack frames without end. A reference in tail
// position adds no frame, so a cycle of only those (a repetition of
// something that can be empty, `(x?)*`) is allowed: the matcher's
// expansion meets the same stack again and stops there.
func (g *Grammar) checkLeftRecursion() error {
	nullable := make([]bool, len(g.alts))
	for changed := true; changed; {
		changed = false
		for r, alts := range g.alts {
			if nullable[r] {
				continue
			}
			for _, a := range alts {
				if g.nullableFrom(a, nullable) {
					nullable[r], changed = true, true
					break
				}
			}
		}
	}
	// left[r]: the rules r may start with.
	left := make([][]leftEdge, len(g.alts))
	for r, alts := range g.alts {
		for _, a := range alts {
			for p := a; g.elems[p].kind == elRef; p++ {
				left[r] = append(left[r], leftEdge{g.elems[p].ref, g.elems[p+1].kind != elEnd})
				if !nullable[g.elems[p].ref] {
					break
				}
			}
		}
	}
	// Strongly connected components (Tarjan's algorithm, iterative so
	// that long chains of helper rules cannot exhaust the stack).
	n := len(g.alts)
	index, low, comp := make([]int32, n), make([]int32, n), make([]int32, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i], comp[i] = -1, -1
	}
	var stack []int32
	next, ncomp := int32(0), int32(0)
	type frame struct {
		r    int32
		edge int
	}
	for root := range int32(n) {
		if index[root] >= 0 {
			continue
		}
		work := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(work) > 0 {
			f := &work[len(work)-1]
			if f.edge < len(left[f.r]) {
				s := left[f.r][f.edge].to
				f.edge++
				switch {
				case index[s] < 0:
					index[s], low[s] = next, next
					next++
					stack = append(stack, s)
					onStack[s] = true
					work = append(work, frame{s, 0})
				case onStack[s]:
					low[f.r] = min(low[f.r], index[s])
				}
				continue
			}
			r := f.r
			work = work[:len(work)-1]
			if len(work) > 0 {
				p := work[len(work)-1].r
				low[p] = min(low[p], low[r])
			}
			if low[r] == index[r] {
				for {
					x := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[x] = false
					comp[x] = ncomp
					if x == r {
						break
					}
				}
				ncomp++
			}
		}
	}
	for r := range left {
		for _, e := range left[r] {
			if e.grows && comp[e.to] == comp[r] {
				return fmt.Errorf("grammar is left-recursive: %s", g.cycle(int32(r), e.to, left, comp))
			}
		}
	}
	return nil
}

// cycle names the rules of a left-recursive cycle from u through its
// edge to v and back to u (within their component), for the error.
func (g *Grammar) cycle(u, v int32, left [][]leftEdge, comp []int32) string {
	prev := map[int32]int32{v: -1}
	queue := []int32{v}
	for len(queue) > 0 && !hasKey(prev, u) {
		x := queue[0]
		queue = queue[1:]
		for _, e := range left[x] {
			if comp[e.to] == comp[u] && !hasKey(prev, e.to) {
				prev[e.to] = x
				queue = append(queue, e.to)
			}
		}
	}
	var path []int32
	for x := u; x >= 0; x = prev[x] {
		path = append(path, x)
		if x == v {
			break
		}
	}
	slices.Reverse(path)
	names := []string{g.names[g.owner[u]]}
	for _, x := range path {
		if name := g.names[g.owner[x]]; name != names[len(names)-1] {
			names = append(names, name)
		}
	}
	if len(names) == 1 {
		names = append(names, names[0])
	}
	return strings.Join(names, " -> ")
}

func hasKey(m map[int32]int32, k int32) bool {
	_, ok := m[k]
	return ok
}

// checkProductive refuses a grammar in which a rule reachable from root
// can never complete (every alternative needs the rule itself, say): the
// output would go on without end, or the grammar would match nothing.
func (g *Grammar) checkProductive() error {
	productive := make([]bool, len(g.alts))
	for changed := true; changed; {
		changed = false
		for r, alts := range g.alts {
			if productive[r] {
				continue
			}
			for _, a := range alts {
				ok := true
				for p := a; g.elems[p].kind != elEnd; p++ {
					if e := g.elems[p]; e.kind == elRef && !productive[e.ref] {
						ok = false
						break
					}
				}
				if ok {
					productive[r], changed = true, true
					break
				}
			}
		}
	}
	seen := make([]bool, len(g.alts))
	queue := []int32{g.root}
	seen[g.root] = true
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		if !productive[r] {
			return fmt.Errorf("grammar: rule %q can never complete (each of its alternatives needs itself)", g.names[g.owner[r]])
		}
		for _, a := range g.alts[r] {
			for p := a; g.elems[p].kind != elEnd; p++ {
				if e := g.elems[p]; e.kind == elRef && !seen[e.ref] {
					seen[e.ref] = true
					queue = append(queue, e.ref)
				}
			}
		}
	}
	return nil
}

// nullableFrom reports whether the alternative at position p can match
// the empty string given the nullable rules known so far.
func (g *Grammar) nullableFrom(p int32, nullable []bool) bool {
	for ; ; p++ {
		switch e := g.elems[p]; e.kind {
		case elEnd:
			return true
		case elChars:
			return false
		default:
			if !nullable[e.ref] {
				return false
			}
		}
	}
}
