// Drives stratad with the official OpenAI Node library, unchanged: the
// base URL and key are the only things pointed at strata. Prints one JSON
// line of findings; exits non-zero on any failure.
import { createRequire } from "node:module";
const require = createRequire(process.env.OPENAI_MODULE_DIR + "/");
const { OpenAI } = require("openai");

const client = new OpenAI({ baseURL: process.env.STRATA_URL, apiKey: process.env.STRATA_KEY, maxRetries: 0 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
const model = out.models[0];

const chat = await client.chat.completions.create({
  model, max_tokens: 8, seed: 1, temperature: 0,
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
  logprobs: true, top_logprobs: 2,
});
out.chat = { object: chat.object, finish: chat.choices[0].finish_reason, text: chat.choices[0].message.content,
  usage: chat.usage, logprobs: chat.choices[0].logprobs.content.length };

let streamed = "", chunks = 0, usage = null;
const stream = await client.chat.completions.create({
  model, max_tokens: 8, seed: 1, temperature: 0, stream: true, stream_options: { include_usage: true },
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
});
for await (const c of stream) {
  chunks++;
  if (c.choices.length) streamed += c.choices[0].delta.content ?? "";
  if (c.usage) usage = c.usage;
}
out.stream = { chunks, text: streamed, usage };

const comp = await client.completions.create({ model, prompt: "Once upon", max_tokens: 4, temperature: 0 });
out.completion = { object: comp.object, text: comp.choices[0].text, usage: comp.usage };

const emb = await client.embeddings.create({ model, input: ["first text", "second text"] });
out.embeddings = { count: emb.data.length, dims: emb.data[0].embedding.length,
  norm: Math.hypot(...emb.data[0].embedding), usage: emb.usage };

const resp = await client.responses.create({ model, instructions: "Be brief.", input: "Hello", max_output_tokens: 8, temperature: 0 });
out.response = { object: resp.object, status: resp.status, text: resp.output_text, usage: resp.usage };
let rtext = "", rdone = null;
const rstream = await client.responses.create({ model, instructions: "Be brief.", input: "Hello", max_output_tokens: 8, temperature: 0, stream: true });
for await (const ev of rstream) {
  if (ev.type === "response.output_text.delta") rtext += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") rdone = ev.response.status;
}
out.responseStream = { text: rtext, status: rdone };

// Tools round trip (answers kept short: the tiny model's context is 256
// tokens). The tiny model has no tool syntax of its own (stratad
// describes the tools to it), so whether it calls is up to chance: the
// protocol is what is asserted. The conversation goes on with the call it
// made, or with one written here, and the tool's result.
const tools = [{ type: "function", function: { name: "wx", parameters: { type: "object", properties: { c: { type: "string" } } } } }];
const tmsgs = [{ role: "user", content: "Paris?" }];
const t1 = await client.chat.completions.create({ model, max_tokens: 4, temperature: 0, tools, messages: tmsgs });
const m1 = t1.choices[0].message;
const call = m1.tool_calls?.[0] ?? { id: "call_1", type: "function", function: { name: "wx", arguments: '{"c":"P"}' } };
tmsgs.push({ role: "assistant", content: m1.content, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: "21" });
const t2 = await client.chat.completions.create({ model, max_tokens: 4, temperature: 0, tools, messages: tmsgs });
const t3 = await client.chat.completions.stream({ model, max_tokens: 4, temperature: 0, tools, messages: tmsgs }).finalChatCompletion();
const shape = (c) => ({ object: c.object, finish: c.choices[0].finish_reason, content: c.choices[0].message.content,
  calls: (c.choices[0].message.tool_calls ?? []).map((t) => ({ id: t.id, type: t.type, name: t.function.name, args: t.function.arguments })) });
out.tools = { first: shape(t1), second: shape(t2), streamed: shape(t3) };
// A named function must be called: constrained to the call's schema,
// even the tiny model's random weights make one (a function without
// parameters keeps the answer within the tiny context).
const ntools = [{ type: "function", function: { name: "wx", parameters: { type: "object", properties: {}, additionalProperties: false } } }];
try {
  const named = await client.chat.completions.create({ model, max_tokens: 40, temperature: 0, tools: ntools, messages: tmsgs.slice(0, 1),
    tool_choice: { type: "function", function: { name: "wx" } } });
  out.tools.named = shape(named);
} catch (e) {
  out.tools.named = { status: e.status, param: e.param ?? e.error?.param };
}
const rtools = [{ type: "function", name: "wx", parameters: { type: "object", properties: { c: { type: "string" } } } }];
const rt = await client.responses.create({ model, max_output_tokens: 8, temperature: 0, tools: rtools, input: [
  { role: "user", content: "Paris?" },
  { type: "function_call", call_id: call.id, name: "wx", arguments: call.function.arguments },
  { type: "function_call_output", call_id: call.id, output: "21" }] });
out.responseTools = { status: rt.status, types: rt.output.map((o) => o.type), tools: rt.tools.length };

// Structured output: the SDK's json_schema response_format (what
// zodResponseFormat builds) and the Responses API's text.format.
const schema = {
  type: "object", additionalProperties: false, required: ["ok", "pick", "count"],
  properties: { ok: { type: "boolean" }, pick: { enum: ["x", "yz"] }, count: { type: "integer" } },
};
const checkPerson = (text) => {
  const v = JSON.parse(text);
  return { keys: Object.keys(v), ok: typeof v.ok === "boolean" && ["x", "yz"].includes(v.pick) && Number.isInteger(v.count) };
};
const so = await client.chat.completions.create({
  model, max_tokens: 200, seed: 3, temperature: 0.8,
  messages: [{ role: "user", content: "Answer in JSON" }],
  response_format: { type: "json_schema", json_schema: { name: "answer", strict: true, schema } },
});
out.structured = { finish: so.choices[0].finish_reason, ...checkPerson(so.choices[0].message.content) };
const rso = await client.responses.create({
  model, input: "Answer in JSON", max_output_tokens: 200, temperature: 0,
  text: { format: { type: "json_schema", name: "answer", strict: true, schema } },
});
out.responseStructured = { status: rso.status, format: rso.text.format.type, ...checkPerson(rso.output_text) };
try {
  await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "bad", schema: { type: "integer", multipleOf: 3 } } } });
  out.badSchema = "no error";
} catch (e) {
  out.badSchema = { status: e.status, param: e.param ?? e.error?.param };
}

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] });
  out.error = "no error";
} catch (e) {
  out.error = { status: e.status, type: e.type ?? e.error?.type, code: e.code ?? e.error?.code };
}
console.log(JSON.stringify(out));
