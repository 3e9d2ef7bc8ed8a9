// Package model is strata's pure-Go CPU reference engine: it runs the
// llama and gemma2 forward passes over GGUF weights with no accelerator.
// Every faster backend (CUDA, streamed tiers) is checked against it, so it
// favours exact, batch-independent arithmetic and a plain structure over
// cleverness: each weight row is decoded once per pass and dotted with every
// token of the batch, a token's result never depends on what else shares
// its batch, and layer weights come through a LayerSource so a streaming
// tier can supply them from elsewhere.
package model
