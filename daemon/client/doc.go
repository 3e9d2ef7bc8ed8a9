// Package client talks to stratad over its Unix socket (or over TCP with
// an API key). It is what the strata command uses, and it deliberately
// imports only the wire-format packages (openai, api), so the unprivileged
// client never links the engine, the NVMe driver or the CUDA binding.
package client
