// tools.mjs - tool calls through the official `openai` client, each call's arguments checked by a real JSON Schema
// validator (`ajv`); tests/cli/serve_tools.sh runs it once per family (a server with that family's template).
//
//   node tools.mjs OPENAI_PKG_DIR AJV_PKG_DIR BASE_URL FAMILY
//
// On a model of random or tiny weights, the grammar of tool_choice "required" or a named function makes the
// model write only calls in the family's own format: on several seeds, non-streamed and streamed, the answer has
// tool_calls (ids, type "function", a tool's name, arguments that parse and validate against that tool's schema),
// no content, finish_reason "tool_calls"; a stream's deltas (id and name once, then argument pieces) join to
// exactly the non-streamed calls of the same seed; parallel_tool_calls false gives exactly one call; a named
// function is the one called; a call max_tokens cuts short is content, or streamed the call it was. Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { need, checker } from './common.mjs';

const [openaiDir, ajvDir, baseURL, family] = process.argv.slice(2);
const OpenAI = need(openaiDir)('openai');
const Ajv = need(ajvDir)('ajv').default ?? need(ajvDir)('ajv');
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
const { check, fails } = checker(`${family}: `);

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', minLength: 1, maxLength: 10 },
          days: { type: 'integer', minimum: 1, maximum: 7 },
          unit: { type: 'string', enum: ['c', 'f'] },
        },
        required: ['city', 'days'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the web',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', maxLength: 12 }, limit: { type: 'integer', minimum: 1, maximum: 9 } },
        required: ['query'],
        additionalProperties: false,
      },
    },
  },
];
const ajv = new Ajv({ strict: false });
const validate = Object.fromEntries(tools.map(t => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'What is the weather in Paris for 3 days?' }];
const base = { model: 'm', messages, tools, max_tokens: 400, temperature: 1 };

// every call well formed; returns a description for the messages
function wellFormed(calls, what, onlyName) {
  if (!Array.isArray(calls) || calls.length === 0) return check(`${what}: tool_calls`, false, JSON.stringify(calls));
  let ok = true, why = '';
  for (const c of calls) {
    let args;
    try { args = JSON.parse(c.function.arguments); } catch { ok = false; why = `arguments not JSON: ${c.function.arguments}`; break; }
    const v = validate[c.function.name];
    if (!v) { ok = false; why = `unknown tool ${c.function.name}`; break; }
    if (onlyName && c.function.name !== onlyName) { ok = false; why = `called ${c.function.name}`; break; }
    if (!v(args)) { ok = false; why = `${c.function.arguments}: ${ajv.errorsText(v.errors)}`; break; }
    if (typeof c.id !== 'string' || !c.id || c.type !== 'function') { ok = false; why = `id/type ${c.id} ${c.type}`; break; }
  }
  check(`${what}: ${calls.length} call(s) ${calls.map(c => c.function.name + c.function.arguments).join(' ').slice(0, 120)}`, ok, why);
}

async function streamed(params) {
  const s = await client.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let content = '', finish = null;
  for await (const ch of s) {
    const c = ch.choices[0];
    if (!c) continue;
    if (c.delta?.content) content += c.delta.content;
    for (const d of c.delta?.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { id: d.id, type: d.type, function: { name: d.function?.name, arguments: '' } };
      else if (d.id || d.function?.name) calls.push({ bad: 'id or name sent twice' });
      calls[d.index].function.arguments += d.function?.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { calls, content, finish };
}

for (const seed of [1, 2, 3]) { // one call (parallel_tool_calls false), then up to 8 (seed 3)
  const par = seed === 3;
  const opts = { ...base, tool_choice: 'required', seed, parallel_tool_calls: par, max_tokens: par ? 1500 : 400 };
  const r = await client.chat.completions.create(opts);
  const m = r.choices[0].message;
  wellFormed(m.tool_calls, `required, seed ${seed}`);
  check(`required, seed ${seed}: finish_reason tool_calls, no content`,
    r.choices[0].finish_reason === 'tool_calls' && !m.content, `${r.choices[0].finish_reason} ${JSON.stringify(m.content)}`);
  check(`required, seed ${seed}: ${par ? 'at most 8 calls' : 'one call'}`, par ? m.tool_calls?.length <= 8 : m.tool_calls?.length === 1);
  const s = await streamed(opts);
  wellFormed(s.calls, `required streamed, seed ${seed}`);
  const same = JSON.stringify(s.calls.map(c => [c.function.name, c.function.arguments])) ===
    JSON.stringify((m.tool_calls ?? []).map(c => [c.function.name, c.function.arguments]));
  check(`required streamed, seed ${seed}: the deltas join to the same calls, finish tool_calls`,
    same && s.finish === 'tool_calls' && !s.content, `${JSON.stringify(s.calls)} vs ${JSON.stringify(m.tool_calls)} ${s.finish}`);
}
for (const seed of [4, 5]) {
  const choice = { type: 'function', function: { name: 'get_weather' } };
  const r = await client.chat.completions.create({ ...base, tool_choice: choice, seed, parallel_tool_calls: false });
  const m = r.choices[0].message;
  wellFormed(m.tool_calls, `named get_weather, one call, seed ${seed}`, 'get_weather');
  check(`named, parallel_tool_calls false, seed ${seed}: exactly one call`, m.tool_calls?.length === 1, JSON.stringify(m.tool_calls));
  const s = await streamed({ ...base, tool_choice: choice, seed, parallel_tool_calls: false });
  wellFormed(s.calls, `named streamed, seed ${seed}`, 'get_weather');
}
// a call max_tokens cuts short (two tokens before its end): not streamed, its text is content; streamed, a call
// whose name had gone out stays the call it was, its text never sent again as content (else, as the generic
// format's JSON, read whole, the text is content as not streamed); finish_reason "length" both ways
{
  const opts = { ...base, tool_choice: 'required', seed: 1, parallel_tool_calls: false };
  const whole = await client.chat.completions.create(opts);
  const cut = { ...opts, max_tokens: Math.max(1, whole.usage.completion_tokens - 2) };
  const r = await client.chat.completions.create(cut);
  const m = r.choices[0].message;
  check(`cut by max_tokens ${cut.max_tokens}: finish length, the text as content, no tool_calls`,
    r.choices[0].finish_reason === 'length' && !m.tool_calls && typeof m.content === 'string' && m.content.length > 0,
    `${r.choices[0].finish_reason} ${JSON.stringify(m)}`);
  const s = await streamed(cut);
  const name = whole.choices[0].message.tool_calls?.[0]?.function.name;
  const asCall = s.content === '' && s.calls.length === 1 && s.calls[0].function.name === name &&
    whole.choices[0].message.tool_calls[0].function.arguments.startsWith(s.calls[0].function.arguments);
  check(`cut by max_tokens, streamed: finish length, the call it was (or, none sent, the same content)`,
    s.finish === 'length' && (asCall || (s.calls.length === 0 && s.content === m.content)),
    `${s.finish} ${JSON.stringify(s.content)} ${JSON.stringify(s.calls)}`);
}
// none: no calls read, the text is content
const n = await client.chat.completions.create({ ...base, tool_choice: 'none', seed: 1, max_tokens: 20 });
check('tool_choice none: no tool_calls', !n.choices[0].message.tool_calls && n.choices[0].finish_reason !== 'tool_calls');
process.exit(fails());
