// ollama.mjs - drives `deltafin serve` with the official `ollama` npm client (tests/cli/serve_extras.sh runs it).
//
//   node ollama.mjs OLLAMA_PKG_DIR HOST OPENAI_GREEDY_TEXT
//
// list and ps name the model; show gives its family and context; chat at temperature 0 gives the same text as
// the OpenAI chat completion (OPENAI_GREEDY_TEXT, same template and sampler), streamed pieces join to it and the
// last piece carries done_reason and the counts; generate streams too; an empty generate loads (done_reason
// "load"); format (a JSON Schema) gives JSON of that schema, through the grammar.
// Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { createRequire } from 'node:module';
import path from 'node:path';

const [pkgDir, host, greedy] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(pkgDir), 'node_modules', 'x.js'));
const { Ollama } = require('ollama');
const ollama = new Ollama({ host });
let fails = 0;
const check = (what, cond, extra = '') => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ' ' + extra}`);
  if (!cond) fails++;
};
const messages = [{ role: 'user', content: 'Tell me a story.' }];
const options = { temperature: 0, num_predict: 24, repeat_penalty: 1 }; // Ollama's default penalty is 1.1

try {
  const list = await ollama.list();
  const model = list.models[0]?.name;
  check('list names the model', list.models.length === 1 && typeof model === 'string', JSON.stringify(list));
  check('ps too', (await ollama.ps()).models[0]?.name === model);
  const show = await ollama.show({ model });
  check('show: its family and context', show.details.family === 'llama' &&
        Object.keys(show.model_info).some(k => k.endsWith('.context_length')), JSON.stringify(show).slice(0, 300));
  const one = await ollama.chat({ model, messages, options, stream: false });
  check('chat (not streamed) at temperature 0: the OpenAI greedy answer', one.message.content === greedy,
        JSON.stringify([one.message.content, greedy]));
  check('... done, with its reason and counts', one.done && ['stop', 'length'].includes(one.done_reason) &&
        one.eval_count > 0 && one.prompt_eval_count > 0, JSON.stringify(one));
  let joined = '', last = null, pieces = 0;
  for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
    joined += part.message.content;
    pieces++;
    last = part;
  }
  check(`chat streamed: ${pieces} pieces join to the same text`, joined === greedy, JSON.stringify(joined));
  check('... the last one done, with counts', last && last.done && last.eval_count === one.eval_count);
  let gen = '';
  for await (const part of await ollama.generate({ model, prompt: 'Once upon a time', raw: true, options, stream: true }))
    gen += part.response;
  check('generate streamed (raw): text', gen.length > 0);
  const load = await ollama.generate({ model, prompt: '', stream: false });
  check('an empty generate loads the model (done_reason "load")', load.done && load.done_reason === 'load');
  const format = { type: 'object', properties: { a: { enum: ['x', 'y'] } }, required: ['a'], additionalProperties: false };
  const js = await ollama.chat({ model, messages, format, stream: false, options: { seed: 1, num_predict: 200 } });
  let parsed = null;
  try { parsed = JSON.parse(js.message.content); } catch { /* checked below */ }
  check(`format (a JSON Schema): JSON of that schema (${js.message.content})`,
        parsed && ['x', 'y'].includes(parsed.a) && Object.keys(parsed).length === 1);
} catch (e) {
  check('the client ran without an exception', false, String(e && e.stack || e));
}
process.exit(fails);
