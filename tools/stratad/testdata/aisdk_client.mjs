// Drives stratad with the Vercel AI SDK, unchanged but for base URL and
// key: the openai-compatible provider (chat completions) and the OpenAI
// provider's default model (the Responses API). Prints one JSON line of
// findings; exits non-zero on any unexpected failure.
import { createRequire } from "node:module";
const require = createRequire(process.env.CLIENT_MODULE_DIR + "/");
const { generateText, streamText, generateObject, embed, embedMany, tool, jsonSchema, Output, APICallError } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { createOpenAI } = require("@ai-sdk/openai");
const { z } = require("zod");

const baseURL = process.env.STRATA_URL, apiKey = process.env.STRATA_KEY;
// supportsStructuredOutputs: stratad follows a json_schema response
// format; without it the provider sends json_object and drops the schema.
const compat = createOpenAICompatible({ name: "strata", baseURL, apiKey, includeUsage: true, supportsStructuredOutputs: true });
const openai = createOpenAI({ baseURL, apiKey });
const model = process.env.STRATA_MODEL;
const out = {};

// refusal is a request the server refused, as the SDK reports it: the
// HTTP status and the parameter its OpenAI-shaped error names.
function refusal(e) {
  const err = APICallError.isInstance(e) ? e : APICallError.isInstance(e?.cause) ? e.cause
    : (e?.errors ?? []).find((x) => APICallError.isInstance(x)) ?? e?.lastError;
  if (!err || !APICallError.isInstance(err)) throw e;
  let param = null;
  try { param = JSON.parse(err.responseBody).error.param; } catch { /* no body */ }
  return { status: err.statusCode, param };
}

// textShape is a generateText or streamText result as asserted.
const textShape = async (r) => ({ text: await r.text, finish: await r.finishReason, usage: await r.usage });

// The Responses API has no seed (the SDK warns and drops it); the OpenAI
// provider forwards an app's end-user id and prompt cache key, which
// change nothing stratad computes.
const settings = {
  compat: { seed: 1 },
  responses: { providerOptions: { openai: { safetyIdentifier: "user-1", promptCacheKey: "greeting" } } },
};
for (const [name, m] of [["compat", compat.chatModel(model)], ["responses", openai(model)]]) {
  const r = out[name] = {};
  const prompt = { system: "Be brief.", prompt: "Hello", maxOutputTokens: 8, temperature: 0, maxRetries: 0, ...settings[name] };
  r.generate = await textShape(await generateText({ model: m, ...prompt }));
  const s = streamText({ model: m, ...prompt, onError: ({ error }) => { throw error; } });
  let parts = 0;
  for await (const p of s.textStream) if (p) parts++;
  r.stream = { ...(await textShape(s)), parts };

  // A tool with an execute function. The tiny model has no tool syntax
  // of its own, so whether it calls is up to chance: the protocol is
  // what is asserted (one step, well formed). With the tool named in
  // toolChoice a call must come back, unless the server refuses the
  // choice it cannot enforce. The schemas are plain JSON Schema: zod's
  // carry a "$schema" URL that alone outgrows the tiny model's 256-token
  // context once stratad describes the tool to it.
  let executed = 0;
  const wx = tool({ inputSchema: jsonSchema({ type: "object", properties: { c: { type: "string" } } }),
    execute: async ({ c }) => { executed++; return `21 in ${c}`; } });
  const t = await generateText({ model: m, prompt: "Paris?", maxOutputTokens: 8, temperature: 0, maxRetries: 0, tools: { wx } });
  r.tools = { finish: t.finishReason, calls: t.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
    results: t.toolResults.length, executed, steps: t.steps.length };
  // The conversation goes on with the call it made, or with one written
  // here, and the tool's result: the SDK sends them as its API's tool
  // messages (role "tool", or function_call and function_call_output
  // items).
  const call = t.toolCalls[0] ?? { toolCallId: "call_1", toolName: "wx", input: { c: "P" } };
  const t2 = await generateText({ model: m, maxOutputTokens: 4, temperature: 0, maxRetries: 0, tools: { wx }, messages: [
    { role: "user", content: "Paris?" },
    { role: "assistant", content: [{ type: "tool-call", toolCallId: call.toolCallId, toolName: "wx", input: call.input }] },
    { role: "tool", content: [{ type: "tool-result", toolCallId: call.toolCallId, toolName: "wx", output: { type: "text", value: "21" } }] }] });
  r.toolResult = { finish: t2.finishReason, text: t2.text, calls: t2.toolCalls.length, input: t2.usage.inputTokens, output: t2.usage.outputTokens };
  const ntools = { wx: tool({ inputSchema: jsonSchema({ type: "object", properties: {}, additionalProperties: false }), execute: async () => { executed++; return "21"; } }) };
  try {
    executed = 0;
    const n = await generateText({ model: m, prompt: "Paris?", maxOutputTokens: 40, temperature: 0, maxRetries: 0,
      tools: ntools, toolChoice: { type: "tool", toolName: "wx" } });
    r.named = { finish: n.finishReason, calls: n.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      results: n.toolResults.length, executed };
  } catch (e) {
    r.named = refusal(e);
  }

  // The same named tool streamed: the call arrives as input deltas.
  try {
    executed = 0;
    const s = streamText({ model: m, prompt: "Paris?", maxOutputTokens: 40, temperature: 0, maxRetries: 0,
      tools: ntools, toolChoice: { type: "tool", toolName: "wx" }, onError: () => {} });
    let deltas = 0;
    for await (const p of s.fullStream) {
      if (p.type === "error") throw p.error;
      if (p.type === "tool-input-delta") deltas++;
    }
    r.streamNamed = { finish: await s.finishReason, calls: (await s.toolCalls).map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      results: (await s.toolResults).length, executed, deltas };
  } catch (e) {
    r.streamNamed = refusal(e);
  }

  // Structured output: a parsed object that fits the schema when the
  // server constrains decoding, else a refusal naming response_format.
  const schema = z.object({ ok: z.boolean() });
  try {
    const o = await generateText({ model: m, prompt: "Is it ok?", maxOutputTokens: 40, temperature: 0, maxRetries: 0,
      output: Output.object({ schema }) });
    r.object = { value: o.output };
  } catch (e) {
    r.object = refusal(e);
  }
  try {
    const o = await generateObject({ model: m, prompt: "Is it ok?", maxOutputTokens: 40, temperature: 0, maxRetries: 0, schema });
    r.generateObject = { value: o.object };
  } catch (e) {
    r.generateObject = refusal(e);
  }
}

const e1 = await embed({ model: compat.textEmbeddingModel(model), value: "first text", maxRetries: 0 });
const e2 = await embedMany({ model: openai.embedding(model), values: ["first text", "second text"], maxRetries: 0 });
const norm = (v) => Math.hypot(...v);
out.embed = { dims: e1.embedding.length, norm: norm(e1.embedding), tokens: e1.usage?.tokens ?? 0,
  many: e2.embeddings.length, manyDims: e2.embeddings[0].length, manyNorm: norm(e2.embeddings[1]),
  same: e1.embedding.every((x, i) => Math.abs(x - e2.embeddings[0][i]) < 1e-4) };
console.log(JSON.stringify(out));
