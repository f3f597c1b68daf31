// client.mjs - drives `deltafin serve` with the official `openai` npm client
// (tests/cli/serve.sh runs it).
//
//   node client.mjs OPENAI_PKG_DIR BASE_URL API_KEY basic
//   node client.mjs OPENAI_PKG_DIR BASE_URL API_KEY load N
//
// basic: models.list, chat (non-streaming and streaming: the joined deltas are
// the non-streamed answer at temperature 0), completions, stop, seed
// reproducibility, logprobs, n, and the client's errors for an unknown model and
// a bad API key. load: N distinct prompts sent one at a time, then all at once;
// every concurrent answer must be the one its own prompt got alone.
// Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { createRequire } from 'node:module';
import path from 'node:path';

const [pkgDir, baseURL, apiKey, mode, nArg] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(pkgDir), 'node_modules', 'x.js'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
let fails = 0;
const check = (what, cond, extra = '') => {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}${cond ? '' : ' ' + extra}`);
  if (!cond) fails++;
};

async function basic() {
  const models = await client.models.list();
  const model = models.data[0].id;
  check('models.list names the model', models.data.length === 1 && typeof model === 'string');

  const messages = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me a story.' }];
  const full = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  const text = full.choices[0].message.content;
  check('chat: an answer', typeof text === 'string' && text.length > 0 && full.choices[0].message.role === 'assistant');
  check('chat: usage', full.usage.completion_tokens > 0 && full.usage.total_tokens === full.usage.prompt_tokens + full.usage.completion_tokens);

  const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let joined = '', finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta?.content) joined += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check('chat stream: the deltas join to the non-streamed answer', joined === text, JSON.stringify([joined, text]));
  check('chat stream: finish_reason and usage', finish === full.choices[0].finish_reason && usage?.completion_tokens === full.usage.completion_tokens);
  check('chat stream: several chunks', chunks > 3);

  const comp = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
  check('completions: text', comp.choices[0].text.length > 0 && comp.object === 'text_completion');
  const words = comp.choices[0].text.split(' ').filter((w) => w.length > 2);
  const stopWord = words[Math.min(2, words.length - 1)];
  const cut = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0, stop: [stopWord] });
  check('stop: the text ends before the stop string', cut.choices[0].text === comp.choices[0].text.slice(0, comp.choices[0].text.indexOf(stopWord)) &&
    cut.choices[0].finish_reason === 'stop', JSON.stringify([cut.choices[0].text, stopWord]));

  const a = await client.completions.create({ model, prompt: 'One day', max_tokens: 24, temperature: 1.0, seed: 1234 });
  const b = await client.completions.create({ model, prompt: 'One day', max_tokens: 24, temperature: 1.0, seed: 1234 });
  check('seed: same seed, same text', a.choices[0].text === b.choices[0].text);
  const n2 = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0.8, seed: 5, n: 2, logprobs: true, top_logprobs: 2 });
  check('n: two choices', n2.choices.length === 2 && n2.choices[1].index === 1);
  const lp = n2.choices[0].logprobs?.content;
  check('logprobs: one entry per token, each with 2 alternatives', Array.isArray(lp) && lp.length > 0 &&
    lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2));

  try {
    await client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 4 });
    check('unknown model: an error', false);
  } catch (e) {
    check('unknown model: NotFoundError (404)', e.status === 404 && e.error?.code === 'model_not_found', String(e));
  }
  try {
    const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
    await bad.models.list();
    check('wrong API key: an error', false);
  } catch (e) {
    check('wrong API key: AuthenticationError (401)', e.status === 401, String(e));
  }
}

async function load(n) {
  const prompts = Array.from({ length: n }, (_, i) => `Story number ${i}: once there was a`);
  const model = (await client.models.list()).data[0].id;
  const one = (p) => client.completions.create({ model, prompt: p, max_tokens: 12, temperature: 0 });
  const alone = [];
  for (const p of prompts) alone.push((await one(p)).choices[0].text);
  const t0 = Date.now();
  const together = await Promise.allSettled(prompts.map((p) => one(p)));
  const secs = (Date.now() - t0) / 1000;
  const done = together.filter((r) => r.status === 'fulfilled');
  check(`load: all ${n} concurrent requests answered`, done.length === n,
    together.filter((r) => r.status === 'rejected').map((r) => String(r.reason)).slice(0, 3).join('; '));
  let same = 0;
  together.forEach((r, i) => { if (r.status === 'fulfilled' && r.value.choices[0].text === alone[i] && r.value.choices[0].finish_reason) same++; });
  check(`load: every answer is its own prompt's (${same}/${n} match the one-at-a-time answers)`, same === n);
  console.log(`load: ${n} concurrent requests in ${secs.toFixed(2)} s`);
}

try {
  if (mode === 'basic') await basic();
  else if (mode === 'load') await load(parseInt(nArg || '100', 10));
  else throw new Error('mode: basic or load N');
} catch (e) {
  console.log(`FAIL unexpected error: ${e?.stack || e}`);
  fails++;
}
process.exit(fails ? 1 : 0);
