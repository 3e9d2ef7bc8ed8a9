// Package synth writes random-weight models whose layout matches real
// checkpoints exactly: the same GGUF metadata keys, tensor names, types and
// dimensions that llama.cpp's converter and quantizer produce for Llama 3.1,
// Mistral, Gemma 2 and 3, Qwen2.5 and 3, Phi-3 and the mixture-of-experts
// Mixtral and Qwen3-MoE, with a tokenizer
// vocabulary of the right size and kind.
//
// strata needs such files because real weights are tens of gigabytes behind
// licence gates: the streaming engine, the loaders and the benchmarks must be
// exercised at full 8B/70B scale on any machine, and the CPU reference engine
// needs small models (the "tiny" shapes) whose every number is known. The
// random values are scaled so a forward pass stays numerically healthy
// (activations O(1) through all layers, logits with a clear argmax), and an
// optional Hugging Face directory carries bit-identical weights so tests can
// compare against the transformers formulation of the same model.
package synth
