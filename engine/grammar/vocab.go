package grammar

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/strata-llm/strata/engine/tokenizer"
)

// Vocab is a vocabulary arranged for mask computation: the token pieces
// as a byte trie stored in preorder, so that a mask is one forward scan
// that skips every subtree the grammar rules out at its first byte. It is
// immutable and shared by every Matcher of the vocabulary.
type Vocab struct {
	n      int
	pieces [][]byte // nil: never allowed (control tokens)
	eog    []int32

	// Preorder trie nodes (the root, the empty prefix, is not stored):
	// node i adds byte nodeByte[i] at depth nodeDepth[i] (1-based), its
	// subtree ends before nodeSkip[i], and the tokens whose piece ends
	// at it are toks[tokStart[i]:tokStart[i+1]].
	nodeByte  []byte
	nodeDepth []uint16
	nodeSkip  []int32
	tokStart  []int32
	toks      []int32
	maxDepth  int
}

// NewVocab builds a Vocab of len(pieces) tokens: pieces[i] is token i's
// bytes, nil or empty for a token the grammar may never produce (control
// tokens); eog lists the end-of-generation tokens, allowed exactly where
// the grammar accepts.
func NewVocab(pieces [][]byte, eog []int32) (*Vocab, error) {
	v := &Vocab{n: len(pieces), pieces: pieces}
	for _, id := range eog {
		if id < 0 || int(id) >= len(pieces) {
			return nil, fmt.Errorf("grammar vocabulary: end-of-generation token %d is outside the vocabulary (0..%d)", id, len(pieces)-1)
		}
		v.eog = append(v.eog, id)
	}
	var ids []int32
	for i, p := range pieces {
		if len(p) > 0 && !slices.Contains(v.eog, int32(i)) {
			if len(p) > 1<<16-1 {
				return nil, fmt.Errorf("grammar vocabulary: token %d is %d bytes long", i, len(p))
			}
			ids = append(ids, int32(i))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(pieces[a], pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	// path[d] is the node at depth d+1 of the previous piece.
	var path []int32
	var prev []byte
	for _, id := range ids {
		p := pieces[id]
		common := 0
		for common < len(p) && common < len(prev) && common < len(path) && p[common] == prev[common] {
			common++
		}
		path = path[:common]
		for d := common; d < len(p); d++ {
			path = append(path, int32(len(v.nodeByte)))
			v.nodeByte = append(v.nodeByte, p[d])
			v.nodeDepth = append(v.nodeDepth, uint16(d+1))
			v.tokStart = append(v.tokStart, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	v.tokStart = append(v.tokStart, int32(len(v.toks)))
	// Subtree ends: the next node no deeper than this one.
	v.nodeSkip = make([]int32, len(v.nodeByte))
	var open []int32
	for i, d := range v.nodeDepth {
		for len(open) > 0 && v.nodeDepth[open[len(open)-1]] >= d {
			v.nodeSkip[open[len(open)-1]] = int32(i)
			open = open[:len(open)-1]
		}
		open = append(open, int32(i))
	}
	for _, i := range open {
		v.nodeSkip[i] = int32(len(v.nodeByte))
	}
	return v, nil
}

// VocabFromTokenizer is the Vocab of a model's tokenizer: each token's
// decoded bytes, with control and unknown tokens (which print nothing)
// never allowed and the tokenizer's end-of-generation tokens as eog.
func VocabFromTokenizer(t *tokenizer.Tokenizer) (*Vocab, error) {
	n := t.VocabSize()
	pieces := make([][]byte, n)
	var eog []int32
	for i := range int32(n) {
		if t.IsEOG(i) {
			eog = append(eog, i)
			continue
		}
		switch t.TokenType(i) {
		case tokenizer.TypeControl, tokenizer.TypeUnknown, tokenizer.TypeUnused:
			continue
		}
		pieces[i] = t.Piece(i)
	}
	return NewVocab(pieces, eog)
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.n }

// Nodes is the number of trie nodes (a mask walk visits at most these).
func (v *Vocab) Nodes() int { return len(v.nodeByte) }
