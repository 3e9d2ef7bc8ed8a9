// Package hf opens Hugging Face model directories (config.json, the
// safetensors weights, tokenizer.json) as the same model.Config,
// model.Weights and tokenizer.Vocab that a GGUF file gives, so every
// backend, the prefab pool writer and the server run a checkpoint as it is
// downloaded, without a conversion to GGUF first.
//
// The differences between the two layouts are resolved here and nowhere
// else: HF's tensor names, llama's q/k rows (llama.cpp's converter permutes
// them so that RoPE pairs are adjacent; transformers rotates halves), one
// tensor per expert instead of merged ones, Gemma's norms stored as w for a
// scale of 1 + w, tied embeddings, and the RoPE scaling that config.json
// states and a GGUF carries as tensors (llama3's rope_freqs, Phi-3's
// LongRoPE factors). Matrices stay zero-copy views of the mapped files
// where their bytes need no change; F32, F16 and BF16 tensors load.
package hf
