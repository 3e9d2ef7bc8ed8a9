// Package sched is strata's one decode loop: continuous batching over the
// engine's batched forward pass, which stratad runs for every request and
// `strata run` runs in its own process (Generate). Every iteration runs one
// Backend.Forward (CPU or GPU: engine.Backend) over all active sequences —
// a prompt chunk for sequences still reading their prompt, one token for
// those decoding — then picks each sequence's next token (its own Sampler;
// a greedy request takes the token the backend selected on the device,
// the sampler's fast path), streams it to its request, ends it on a stop
// string, and drops sequences that finished or whose client went away,
// giving their KV cache (a GPU slot) back. New requests join between
// iterations and wait in a bounded queue when the batch is full, so a long
// generation never blocks a short one behind it.
//
// Cancellation is checked for every sequence before each pass and again
// before sampling, so a request whose context is cancelled (its client
// disconnected) produces no further token: it is dropped within one token.
package sched
