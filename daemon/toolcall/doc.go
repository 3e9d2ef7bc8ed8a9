// Package toolcall turns a model's own tool-call syntax into OpenAI tool
// calls. Each model family was trained to call tools in its own way, and
// its chat template says which: Llama 3.x writes a bare JSON object
// ({"name": ..., "parameters": ...}, sometimes after <|python_tag|>),
// Hermes-style templates (Qwen 2.5 and many fine-tunes) wrap each call in
// <tool_call>…</tool_call>, Mistral writes [TOOL_CALLS] and a JSON array.
// Models whose template knows no tools are asked (by the server) to answer
// in plain JSON, the Generic family.
//
// Parse reads a whole output; Parser reads it as it is generated and says
// what to stream: text until a call begins, then each call's id and name
// and its arguments piece by piece. Both keep text that only looks like
// the start of a call, but is not one, as content: malformed output is
// never an error.
package toolcall
