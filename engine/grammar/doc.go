// Package grammar constrains generation to a formal language: a GBNF
// grammar (llama.cpp's notation), a JSON Schema translated into one, or
// any JSON object.
//
// A Grammar is parsed and lowered once into flat rules whose elements are
// code-point sets and rule references; repetition operators become helper
// rules, so the matcher only knows sequences and alternatives. Matching
// is a pushdown automaton: a position is a stack of rule positions, kept
// as hash-consed linked nodes so that equal stacks are one node, and the
// automaton's state is the set of stacks that are still alive (grammars
// may be ambiguous) plus a partly read UTF-8 character.
//
// A Matcher joins a grammar to a vocabulary. Every state it meets gets a
// small integer id, its byte transitions are remembered in a dense table,
// and its token mask (which tokens may come next) is computed once by a
// walk of the vocabulary's byte trie and then kept, so that a decode step
// in a state seen before costs a table walk over the chosen token's bytes
// and a mask lookup. End-of-generation tokens are allowed exactly where
// the grammar accepts; control tokens never are.
package grammar
