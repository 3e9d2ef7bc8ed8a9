// Package tokenizer turns text into model token ids and back, reproducing
// llama.cpp's tokenizers bit for bit so that a GGUF model run by strata sees
// exactly the prompts it would see under llama.cpp (a single differing id
// changes every logit after it, which makes engine comparisons impossible).
//
// Two tokenizer families are implemented, selected by the GGUF key
// tokenizer.ggml.model:
//
//   - "gpt2": byte-level BPE (Llama 3, Qwen2/2.5/3, Mistral's Tekken, GPT-2
//     and its relatives, DeepSeek, Falcon, StarCoder, ...). Text is cut into
//     pieces by the pre-tokenizer tokenizer.ggml.pre names (pretok.go: the
//     regexes of the models' tokenizer.json files, run as Go regexps with
//     their one look-ahead rewritten, and a hand-written scanner for the
//     Llama 3 / Qwen2 regex, the common case); each piece is mapped byte by
//     byte through GPT-2's bytes_to_unicode table and merged by merge rank.
//     An unknown pre-tokenizer name is an error, not a silent fallback.
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
