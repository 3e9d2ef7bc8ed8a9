// Package sample turns a model's logits into the next token. It implements
// the usual llama.cpp-style chain (repetition penalty, top-k, top-p, min-p,
// temperature, seeded draw) in plain Go so that a given seed reproduces the
// same tokens on every backend: the engine is checked against itself across
// CPU and GPU runs, and sampling must not be a source of divergence.
//
// Order of operations in Sample:
//
//  1. Repetition penalty over the distinct tokens among the last
//     RepeatLastN of history (llama.cpp semantics: a positive logit is
//     divided by the penalty, a non-positive one multiplied).
//  2. Temperature 0: return the arg max (lowest id on ties). Otherwise:
//  3. top-k: keep the TopK highest logits (ties: lower id first).
//  4. top-p: keep the smallest highest-first prefix whose probability (at
//     temperature 1) reaches TopP.
//  5. min-p: keep tokens whose probability is at least MinP times the
//     largest (at temperature 1).
//  6. Divide the surviving logits by Temperature, softmax, and draw with a
//     PCG generator seeded from Seed.
//
// Steps 3–5 always keep at least one token.
package sample
