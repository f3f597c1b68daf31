// structured.mjs - constrained output through the official `openai` client, checked by a real JSON Schema
// validator (`ajv`); tests/cli/serve_grammar.sh runs it.
//
//   node structured.mjs OPENAI_PKG_DIR AJV_PKG_DIR BASE_URL
//
// A schema of nested objects, arrays with bounds, enums, const, anyOf, a $ref, an integer range, a string
// pattern and lengths: on 50 seeds at temperature 1, streamed and not, every answer parses as JSON and validates
// against the schema, and finishes with "stop" (the grammar, once complete, lets only end-of-generation through).
// response_format json_object gives a JSON object (or, cut at max_tokens, the start of one); llama-server's `grammar` field a text of that grammar; a
// schema the compiler cannot honour, or a grammar that does not parse, is a 400 naming the field.
// Prints "ok ..." / "FAIL ..." lines; the exit status counts failures.
import { need, checker } from './common.mjs';

const [openaiDir, ajvDir, baseURL] = process.argv.slice(2);
const OpenAI = need(openaiDir)('openai');
const Ajv = need(ajvDir)('ajv').default ?? need(ajvDir)('ajv');
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0 });
const { check, fails } = checker();

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    tags: { type: 'array', items: { enum: ['red', 'green', 'blue'] }, minItems: 1, maxItems: 3 },
    address: { $ref: '#/$defs/address' },
    kind: { anyOf: [{ const: 'person' }, { type: 'null' }, { type: 'boolean' }] },
    note: { type: 'string', maxLength: 6 },
  },
  required: ['name', 'age', 'tags', 'address', 'kind'],
  additionalProperties: false,
  $defs: {
    address: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 8 }, zip: { type: 'string', pattern: '^[0-9]{5}$' } },
      required: ['city', 'zip'],
      additionalProperties: false,
    },
  },
};
const validate = new Ajv({ strict: false }).compile(schema);
const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];
const response_format = { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } };

const judge = (text, finish) => {
  let v;
  try { v = JSON.parse(text); } catch { return `not JSON: ${JSON.stringify(text).slice(0, 200)}`; }
  if (!validate(v)) return `invalid: ${JSON.stringify(validate.errors).slice(0, 300)} in ${text.slice(0, 200)}`;
  if (finish !== 'stop') return `finish_reason ${finish}`;
  return '';
};

try {
  let bad = [], n = 0;
  for (let seed = 1; seed <= 50; seed++) {
    const r = await client.chat.completions.create({ model: 'm', messages, response_format, seed, temperature: 1,
                                                     max_tokens: 1500 });
    const why = judge(r.choices[0].message.content, r.choices[0].finish_reason);
    if (why) bad.push(`seed ${seed}: ${why}`);
    n++;
  }
  check(`json_schema, 50 seeds, not streamed: every answer valid (${n - bad.length}/${n})`, !bad.length, bad.slice(0, 3).join('\n'));
  bad = [], n = 0;
  for (let seed = 51; seed <= 100; seed++) {
    const stream = await client.chat.completions.create({ model: 'm', messages, response_format, seed, temperature: 1,
                                                          max_tokens: 1500, stream: true });
    let text = '', finish = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    const why = judge(text, finish);
    if (why) bad.push(`seed ${seed}: ${why}`);
    n++;
  }
  check(`json_schema, 50 seeds, streamed: every answer valid (${n - bad.length}/${n})`, !bad.length, bad.slice(0, 3).join('\n'));

  // json_object: any object, which a story model may never finish (its keys are free text): a finished answer is
  // an object, a cut one its start
  let stopped = 0, wrong = [];
  for (let seed = 1; seed <= 6; seed++) {
    const obj = await client.chat.completions.create({ model: 'm', messages, seed, temperature: 0.8, max_tokens: 400,
                                                       response_format: { type: 'json_object' } });
    const t = obj.choices[0].message.content, fin = obj.choices[0].finish_reason;
    let o = null;
    try { o = JSON.parse(t); } catch { /* checked below */ }
    if (fin === 'stop') stopped++;
    if (!t.startsWith('{') || (fin === 'stop' && (o === null || typeof o !== 'object' || Array.isArray(o))))
      wrong.push(`seed ${seed} (${fin}): ${t.slice(0, 120)}`);
  }
  check(`json_object, 6 seeds: each a JSON object (${stopped} finished) or the start of one`, !wrong.length,
        wrong.join('\n'));

  const g = await client.completions.create({ model: 'm', prompt: 'Once', seed: 5, max_tokens: 40,
                                              grammar: 'root ::= ("yes" | "no") (", " ("yes" | "no")){0,3} "."' });
  check(`grammar (GBNF): a sentence of it (${JSON.stringify(g.choices[0].text)})`,
        /^(yes|no)(, (yes|no)){0,3}\.$/.test(g.choices[0].text) && g.choices[0].finish_reason === 'stop');

  const refused = async (what, body, param) => {
    try {
      await client.chat.completions.create({ model: 'm', messages, max_tokens: 4, ...body });
      check(what, false, 'it was answered');
    } catch (e) {
      check(what, e.status === 400 && e.param === param, `${e.status} ${e.param} ${e.message}`);
    }
  };
  await refused('a schema keyword the compiler cannot honour: 400 naming response_format',
                { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
                  patternProperties: { '^a': { type: 'string' } } } } } }, 'response_format');
  await refused('a grammar that does not parse: 400 naming grammar', { grammar: 'root ::= missing' }, 'grammar');
  await refused('a left-recursive grammar: 400', { grammar: 'root ::= root "a" | "b"' }, 'grammar');
  await refused('grammar and response_format together: 400',
                { grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, 'grammar');
} catch (e) {
  check('the client ran without an exception', false, String(e && e.stack || e));
}
process.exit(fails() ? 1 : 0);
