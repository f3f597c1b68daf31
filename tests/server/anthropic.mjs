// anthropic.mjs - drives `deltafin serve` with the official `@anthropic-ai/sdk` client (tests/cli/serve_extras.sh
// runs it).
//
//   node anthropic.mjs SDK_PKG_DIR BASE_URL OPENAI_GREEDY_TEXT [API_KEY]
//
// messages.create at temperature 0 gives the OpenAI chat completion's text (OPENAI_GREEDY_TEXT: same template,
// same greedy sampler), with Anthropic's stop reason and usage (input + cache read = countTokens's count);
// streamed, the events come in Anthropic's order and the text deltas join to the same text; stop_sequences end
// the answer before the sequence, named in stop_sequence; a system prompt as blocks and a tool_use /
// tool_result history are taken; tool_choice any and tool (a name) give a tool_use block (stop_reason tool_use),
// streamed too; an image block, a field Anthropic's API does not know and an unknown tool_choice are
// refused with the SDK's BadRequestError (400, the field named), never ignored. With API_KEY: a wrong key is the
// SDK's AuthenticationError (401).
// Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { createRequire } from 'node:module';
import path from 'node:path';

const [pkgDir, baseURL, greedy, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(pkgDir), 'node_modules', 'x.js'));
const Anthropic = require('@anthropic-ai/sdk').default ?? require('@anthropic-ai/sdk');
const client = new Anthropic({ baseURL, apiKey: apiKey || 'none', maxRetries: 0 });
let fails = 0;
const check = (what, cond, extra = '') => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ' ' + extra}`);
  if (!cond) fails++;
};
const model = 'local-model'; // any name: the one model answers it
const messages = [{ role: 'user', content: 'Tell me a story.' }];
const refused = async (what, params, re) => {
  try {
    await client.messages.create(params);
    check(what, false, 'it was answered');
  } catch (e) {
    check(what, e instanceof Anthropic.BadRequestError && e.status === 400 && re.test(e.error?.error?.message),
          `${e.status} ${JSON.stringify(e.error)}`);
  }
};

try {
  const one = await client.messages.create({ model, messages, max_tokens: 24, temperature: 0 });
  const text = one.content.map(b => b.text).join('');
  check('messages.create at temperature 0: the OpenAI greedy answer', text === greedy, JSON.stringify([text, greedy]));
  check('... a message with its stop reason and usage', one.type === 'message' && one.role === 'assistant' &&
        one.id.startsWith('msg_') && ['end_turn', 'max_tokens'].includes(one.stop_reason) &&
        one.usage.output_tokens > 0 && one.usage.input_tokens + one.usage.cache_read_input_tokens > 0,
        JSON.stringify(one));
  const count = await client.messages.countTokens({ model, messages });
  check(`countTokens: the prompt's tokens (${count.input_tokens})`,
        count.input_tokens === one.usage.input_tokens + one.usage.cache_read_input_tokens, JSON.stringify(count));

  const kinds = [];
  let joined = '', deltas = 0;
  const stream = client.messages.stream({ model, messages, max_tokens: 24, temperature: 0 });
  for await (const ev of stream) {
    kinds.push(ev.type);
    if (ev.type === 'content_block_delta') joined += ev.delta.text, deltas++;
  }
  const final = await stream.finalMessage();
  check(`streamed: ${deltas} text deltas join to the same text`, joined === greedy, JSON.stringify(joined));
  check('... the events in Anthropic\'s order', kinds[0] === 'message_start' && kinds[1] === 'content_block_start' &&
        kinds.at(-3) === 'content_block_stop' && kinds.at(-2) === 'message_delta' && kinds.at(-1) === 'message_stop',
        kinds.join(','));
  check('... the final message has the stop reason and the output tokens',
        final.stop_reason === one.stop_reason && final.usage.output_tokens === one.usage.output_tokens,
        JSON.stringify(final));

  const word = greedy.trim().split(/\s+/)[1]; // a word the greedy answer holds (not at its start)
  const cut = await client.messages.create({ model, messages, max_tokens: 24, temperature: 0, stop_sequences: [word] });
  check(`stop_sequences ["${word}"]: the text before it, stop_reason stop_sequence naming it`,
        cut.stop_reason === 'stop_sequence' && cut.stop_sequence === word &&
        cut.content[0].text === greedy.slice(0, greedy.indexOf(word)), JSON.stringify(cut));

  const tools = [{ name: 'get_weather', description: 'The weather in a city',
                   input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const history = await client.messages.create({
    model, max_tokens: 4, temperature: 0, tools,
    system: [{ type: 'text', text: 'You are terse.' }],
    messages: [{ role: 'user', content: 'Weather in Paris?' },
               { role: 'assistant', content: [{ type: 'text', text: 'Let me look.' },
                                              { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '18 C, sunny' }] }] });
  check('a system prompt as blocks, tools and a tool_use / tool_result history are taken',
        history.type === 'message' && history.usage.output_tokens > 0, JSON.stringify(history));

  await refused('an image block: 400 saying so', { model, max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }, /image/);
  await refused('a field Anthropic does not know: 400 naming it', { model, max_tokens: 4, messages, frequency_penalty: 1 },
                /frequency_penalty/);
  // tool_choice any / tool: the grammar makes even this model call; tool_use blocks, stop_reason tool_use
  const small = [{ name: 'get_weather', description: 'The weather in a city',
                   input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } },
                                   required: ['city'], additionalProperties: false } }];
  for (const tool_choice of [{ type: 'any', disable_parallel_tool_use: true }, { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }]) {
    const r = await client.messages.create({ model, max_tokens: 200, temperature: 1, messages, tools: small, tool_choice });
    const uses = r.content.filter(b => b.type === 'tool_use');
    check(`tool_choice ${tool_choice.type}: a tool_use block (get_weather, input.city a string), stop_reason tool_use`,
          r.stop_reason === 'tool_use' && uses.length === 1 && uses[0].name === 'get_weather' &&
          typeof uses[0].input.city === 'string' && /^toolu_/.test(uses[0].id), JSON.stringify(r));
    const s = client.messages.stream({ model, max_tokens: 200, temperature: 1, messages, tools: small, tool_choice });
    const fin = await s.finalMessage();
    const su = fin.content.filter(b => b.type === 'tool_use');
    check(`... streamed: the SDK assembles the same kind of tool_use block from input_json_delta`,
          fin.stop_reason === 'tool_use' && su.length === 1 && typeof su[0].input.city === 'string', JSON.stringify(fin));
  }
  await refused('tool_choice of an unknown type: 400', { model, max_tokens: 4, messages, tools, tool_choice: { type: 'some' } },
                /tool_choice/);
  await refused('no max_tokens: 400 naming it', { model, messages }, /max_tokens/);
  if (apiKey) {
    const wrong = new Anthropic({ baseURL, apiKey: apiKey + 'x', maxRetries: 0 });
    try {
      await wrong.messages.create({ model, messages, max_tokens: 4 });
      check('a wrong x-api-key: 401', false, 'it was answered');
    } catch (e) {
      check('a wrong x-api-key: the SDK\'s AuthenticationError (401)', e instanceof Anthropic.AuthenticationError,
            String(e));
    }
  }
} catch (e) {
  check('the client ran without an exception', false, String(e && e.stack || e));
}
process.exit(fails ? 1 : 0);
