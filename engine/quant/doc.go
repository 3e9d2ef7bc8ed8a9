// Package quant owns the tensor element formats strata reads and writes:
// plain floats (F32, F16, BF16), llama.cpp's block formats (Q4_0, Q8_0 and
// the K-quants Q4_K, Q5_K, Q6_K) and strata's own INT8 per-row symmetric
// format used by the prefab pool. Type ids follow ggml's enum so a GGUF file's
// tensor type field maps to a Type directly; INT8Row takes an id outside
// ggml's range so it can never be confused with one of theirs.
package quant
