// Package tokenizer turns text into model token ids and back, reproducing
// llama.cpp's tokenizers bit for bit so that a GGUF model run by strata sees
// exactly the prompts it would see under llama.cpp (a single differing id
// changes every logit after it, which makes engine comparisons impossible).
//
// Two tokenizer families are implemented, selected by the GGUF key
// tokenizer.ggml.model:
//
//   - "gpt2": byte-level BPE (Llama 3). Text is split by the Llama 3
//     pre-tokenizer (a hand-written scanner equivalent to the regex
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//     because Go's regexp has no look-ahead), each piece is mapped byte by
//     byte through GPT-2's bytes_to_unicode table and merged by merge rank.
//   - "llama": SentencePiece BPE (Llama 1/2, Gemma). Spaces become U+2581,
//     an optional space prefix is added, adjacent symbols are merged by the
//     highest vocabulary score and characters without a token fall back to
//     <0xXX> byte tokens.
//
// Special tokens (control, user-defined and unknown token types) are split
// out of the text before either algorithm runs, longest first, like
// llama.cpp's tokenizer_st_partition. The package also renders chat
// templates (Llama 3 and Gemma built in, anything else through a Jinja
// engine) and decodes ids back to text, including a streaming decoder that
// only ever returns complete UTF-8.
//
// A Tokenizer is immutable after New and safe for concurrent use.
package tokenizer
