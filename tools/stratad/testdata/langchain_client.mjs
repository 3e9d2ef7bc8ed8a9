// Drives stratad with LangChain JS's OpenAI integration, unchanged but
// for base URL and key: invoke, stream, bindTools with a tool result,
// withStructuredOutput and OpenAIEmbeddings. Prints one JSON line of
// findings; exits non-zero on any unexpected failure.
import { createRequire } from "node:module";
const require = createRequire(process.env.CLIENT_MODULE_DIR + "/");
const { ChatOpenAI, OpenAIEmbeddings } = require("@langchain/openai");
const { AIMessage, HumanMessage, SystemMessage, ToolMessage } = require("@langchain/core/messages");
const { z } = require("zod");

const configuration = { baseURL: process.env.STRATA_URL };
const apiKey = process.env.STRATA_KEY, model = process.env.STRATA_MODEL;
// promptCacheKey: apps tuned for OpenAI set it; it changes nothing
// stratad computes.
const chat = (opts) => new ChatOpenAI({ model, apiKey, configuration, maxRetries: 0, temperature: 0, promptCacheKey: "strata-test", ...opts });
const out = {};

// refusal is a request the server refused, as the OpenAI library under
// LangChain reports it: the HTTP status and the parameter it names.
function refusal(e) {
  const status = e?.status ?? e?.cause?.status;
  if (typeof status !== "number") throw e;
  return { status, param: e.param ?? e.error?.param ?? e.cause?.param ?? null };
}

const hello = [new SystemMessage("Be brief."), new HumanMessage("Hello")];
const m8 = chat({ maxTokens: 8 });
const inv = await m8.invoke(hello);
out.invoke = { text: inv.content, finish: inv.response_metadata.finish_reason, usage: inv.usage_metadata };
let text = "", chunks = 0, usage = null;
for await (const c of await m8.stream(hello)) {
  chunks++;
  text += c.content;
  if (c.usage_metadata) usage = c.usage_metadata;
}
out.stream = { text, chunks, usage };

// Tools: the tiny model has no tool syntax of its own, so whether it
// calls is up to chance: the protocol is what is asserted. The
// conversation goes on with the call it made, or with one written here,
// and the tool's result.
const wx = { type: "function", function: { name: "wx", parameters: { type: "object", properties: { c: { type: "string" } } } } };
const shape = (m) => ({ finish: m.response_metadata.finish_reason, content: m.content,
  calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.name, args: c.args })) });
const withTools = chat({ maxTokens: 4 }).bindTools([wx]);
const t1 = await withTools.invoke([new HumanMessage("Paris?")]);
const call = t1.tool_calls?.[0] ?? { id: "call_1", name: "wx", args: { c: "P" }, type: "tool_call" };
const t2 = await withTools.invoke([new HumanMessage("Paris?"), new AIMessage({ content: "", tool_calls: [call] }),
  new ToolMessage({ tool_call_id: call.id, content: "21" })]);
out.tools = { first: shape(t1), second: shape(t2) };
// A named tool must be called, unless the server refuses the choice it
// cannot enforce.
const none = { type: "function", function: { name: "wx", parameters: { type: "object", properties: {}, additionalProperties: false } } };
try {
  out.tools.named = shape(await chat({ maxTokens: 40 }).bindTools([none], { tool_choice: "wx" }).invoke([new HumanMessage("Paris?")]));
} catch (e) {
  out.tools.named = refusal(e);
}

// The named tool streamed, through chat completions and the Responses
// API: the chunks add up to the call.
const streamNamed = async (useResponsesApi) => {
  try {
    let all;
    for await (const c of await chat({ maxTokens: 40, useResponsesApi }).bindTools([none], { tool_choice: "wx" }).stream([new HumanMessage("Paris?")])) {
      all = all ? all.concat(c) : c;
    }
    return { finish: all.response_metadata.finish_reason ?? null, content: all.content,
      calls: all.tool_calls.map((c) => ({ id: c.id, name: c.name, args: c.args })) };
  } catch (e) {
    return refusal(e);
  }
};
out.tools.streamNamed = await streamNamed(false);

// Structured output, through response_format json_schema (LangChain's
// default for a model name it does not know; a zod schema) and through a
// named tool (a plain JSON Schema: zod's "$schema" URL alone would
// outgrow the tiny model's 256-token context once stratad describes the
// tool to it; the call takes about 50 tokens of what is left).
out.structured = {};
for (const [method, schema, maxTokens] of [["jsonSchema", z.object({ ok: z.boolean() }), 40],
  ["functionCalling", { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] }, 56]]) {
  try {
    const v = await chat({ maxTokens }).withStructuredOutput(schema, { method, name: "answer" }).invoke([new HumanMessage("Is it ok?")]);
    out.structured[method] = { value: v ?? null };
  } catch (e) {
    out.structured[method] = refusal(e);
  }
}

// The same through the Responses API: text, a tool result, structured
// output (text.format).
const rm = chat({ maxTokens: 8, useResponsesApi: true });
const rinv = await rm.invoke(hello);
const rtool = await chat({ maxTokens: 4, useResponsesApi: true }).bindTools([wx]).invoke([new HumanMessage("Paris?"),
  new AIMessage({ content: "", tool_calls: [call] }), new ToolMessage({ tool_call_id: call.id, content: "21" })]);
out.responses = { text: rinv.text, usage: rinv.usage_metadata, toolResult: { text: rtool.text, calls: rtool.tool_calls?.length ?? 0, usage: rtool.usage_metadata } };
out.responses.streamNamed = await streamNamed(true);
try {
  out.responses.structured = { value: (await chat({ maxTokens: 40, useResponsesApi: true }).withStructuredOutput(z.object({ ok: z.boolean() }), { name: "answer" })
    .invoke([new HumanMessage("Is it ok?")])) ?? null };
} catch (e) {
  out.responses.structured = refusal(e);
}

const emb = new OpenAIEmbeddings({ model, apiKey, configuration, maxRetries: 0 });
const docs = await emb.embedDocuments(["first text", "second text"]);
const q = await emb.embedQuery("first text");
out.embeddings = { count: docs.length, dims: docs[0].length, norm: Math.hypot(...docs[1]), queryDims: q.length,
  same: q.every((x, i) => Math.abs(x - docs[0][i]) < 1e-4) };
console.log(JSON.stringify(out));
