// Package openai is the wire format of the OpenAI-compatible API that
// stratad serves: request and response types for /v1/models,
// /v1/chat/completions and /v1/completions, the request decoder that turns
// untrusted bytes into validated parameters (fuzzed), the error shape
// {"error":{"message","type","param","code"}}, and strict server-sent-event
// framing. It imports nothing from the engine so the unprivileged client can
// share it without linking the model code.
//
// Field names, object names ("chat.completion", "chat.completion.chunk",
// "text_completion", "model", "list") and the streaming framing follow
// OpenAI's published API reference so that the official client libraries
// and tools built on them (Open WebUI) work unchanged.
package openai
