// Package safetensors reads and writes Hugging Face model directories
// (config.json plus one model.safetensors or an index with shards). strata
// needs it for two reasons: to import HF checkpoints into its own formats, and
// to let tests compare the CPU engine against reference weights written in the
// layout transformers loads. Files are memory-mapped read-only so opening a
// 70B checkpoint costs no copies; every header is validated before any tensor
// byte is handed out, because headers come from untrusted downloads.
package safetensors
