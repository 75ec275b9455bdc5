// Constrained denoising end to end (engine/cdecode.c through `fogline serve`): random tiny
// models of each layout, which say garbage unconstrained, must answer every response_format
// with a valid value, checked by npm ajv (a real JSON Schema validator) and JSON.parse:
// - random schemas of the subset (tests/structured/gen.mjs) x random prompts, over the
//   official openai client, greedy and sampled, at max_tokens exactly the constraint's
//   minimum (learnt from the server's own refusal of max_tokens 1) and above it;
// - every unmasking policy (threshold, static, dynamic, entropy, sequential);
// - json_object and a schema streamed; over the WebSocket, the commits add up to a valid value;
// - strings under pattern, format and lengths, numbers under bounds and multipleOf (ajv with
//   npm ajv-formats), and vLLM's structured_outputs: a regex the whole reply matches (checked
//   with JavaScript's RegExp), a choice, a json schema, on chat and text completions and the
//   WebSocket; their bad inputs.
// FL_STRUCT_MODELS: a directory with q3 (SDAR layout) and q2 (Fast-dLLM v2: shifted logits,
// sub-blocks); FL_LLADA2_MODEL: a LLaDA2 MoE (its own stand-in tokenizer, vocabulary 157184).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, require, user, connect } from '../server/lib.mjs';
import { rng, pick, genSchema } from './gen.mjs';

const OpenAI = require('openai').default;
const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const ajv = new Ajv({ strict: false, unicodeRegExp: true });
addFormats(ajv, { mode: 'full' });

const MODELS = [
  ['sdar', path.join(process.env.FL_STRUCT_MODELS || '', 'q3')],
  ['fast-dllm-v2', path.join(process.env.FL_STRUCT_MODELS || '', 'q2')],
  ['llada2', process.env.FL_LLADA2_MODEL],
];
// schemas per model (the LLaDA2 model gets half: each new schema walks its 157184 tokens from
// every automaton state once, a fraction of a second); the sanitizer build runs fewer
const SCHEMAS = Number(process.env.FL_STRUCT_SCHEMAS || 60);
const PROMPTS = ['hi', 'Where is my order 48213?', 'Give me the refund status as JSON.',
  'List three items.', 'ünïcødé ✓ please', 'a'.repeat(40)];

const servers = [];
after(async () => {
  for (const s of servers) assert.equal(await s.stop(), 0, s.log());
});

function check(schema, text, what) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON (${e.message}): ${JSON.stringify(text)}\nschema ${JSON.stringify(schema)}`);
  }
  if (schema) {
    const validate = ajv.compile(schema);
    assert.ok(validate(v), `${what}: invalid (${ajv.errorsText(validate.errors)}): ${text}\nschema ${JSON.stringify(schema)}`);
  } else {
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: not an object: ${text}`);
  }
  // no whitespace before or after the value, and at most 20 bytes of it between two tokens
  assert.equal(text, text.trim(), `${what}: whitespace around the value`);
  assert.ok(!/[ \t\r\n]{21}/.test(text.replace(/"(?:[^"\\]|\\.)*"/g, '""')), `${what}: a run of whitespace over 20 bytes`);
}

const format = (schema) => (schema
  ? { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } }
  : { type: 'json_object' });

for (const [name, dir] of MODELS) {
  test(`${name}: random schemas x prompts are always answered with a valid value`, async () => {
    const server = await startServer(['--max-tokens-limit', '600', '--max-prompt-tokens', '200'], { model: dir });
    servers.push(server);
    const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
    const r = rng(name.length * 7919 + 17);
    let tight = 0;
    let changed = 0;
    const n = name === 'llada2' ? Math.ceil(SCHEMAS / 2) : SCHEMAS;
    for (let i = 0; i < n; i++) {
      const schema = i % 10 === 9 ? null : genSchema(r, 2);
      const messages = user(pick(r, PROMPTS));
      // the fewest tokens the format allows: the refusal of max_tokens 1 names it
      let min = 1;
      try {
        const one = await client.chat.completions.create({ model: 'fogline', messages, max_tokens: 1, response_format: format(schema) });
        check(schema, one.choices[0].message.content, `schema ${i} at max_tokens 1`);
      } catch (e) {
        if (!(e instanceof OpenAI.APIError)) throw e;
        assert.equal(e.status, 400, e.message);
        assert.equal(e.param, 'max_tokens', e.message);
        const m = /takes (\d+) tokens; max_tokens is 1/.exec(e.message);
        assert.ok(m, e.message);
        min = Number(m[1]);
      }
      assert.ok(min <= 560, `schema ${i}: min ${min}`);
      for (const [k, max, temperature] of [[0, min, 0], [1, min + Math.floor(r() * 40), r() < 0.4 ? 0.8 : 0]]) {
        // every unmasking policy picks from the constraint's assignment
        const policy = k === 0 ? undefined : pick(r, ['threshold', 'static', 'dynamic', 'entropy', 'sequential']);
        const res = await client.chat.completions.create({ model: 'fogline', messages, max_tokens: max, temperature,
          response_format: format(schema), ...(policy ? { decoding: { policy, k: 2 } } : {}) });
        const c = res.choices[0];
        check(schema, c.message.content, `schema ${i} max_tokens ${max} temperature ${temperature}`);
        assert.ok(res.usage.completion_tokens <= max);
        if (k === 0) tight++;
        changed += res.fogline?.constrained ?? 0;
      }
    }
    assert.equal(tight, n);
    // garbage models: the constraint did the work
    assert.ok(changed > 0, 'the constraint changed some tokens');
  });
}

test('json_object and a schema streamed, and over the WebSocket: the commits add up to a valid value', async () => {
  const server = servers[0];
  const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 120,
    response_format: { type: 'json_object' }, stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? '';
  check(null, text, 'streamed json_object');
  const listSchema = { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 5 };
  const s2 = await client.chat.completions.create({ model: 'fogline', messages: user('numbers'), max_tokens: 100,
    response_format: format(listSchema), stream: true });
  let t2 = '';
  for await (const ch of s2) t2 += ch.choices[0]?.delta?.content ?? '';
  check(listSchema, t2, 'streamed json_schema');
  const schema = { type: 'object', properties: { status: { enum: ['pending', 'shipped'] }, eta: { type: 'integer' } },
    required: ['status', 'eta'], additionalProperties: false };
  const c = await connect(server);
  c.send({ type: 'chat', id: 'w1', messages: user('Where is my order?'), max_tokens: 80, response_format: format(schema) });
  const frames = await c.collect('w1');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  const commits = frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  check(schema, commits, 'WebSocket commits');
  // a schema outside the subset: an error frame naming the keyword
  c.send({ type: 'chat', id: 'w2', messages: user('hi'), response_format: format({ type: 'string', minProperties: 3 }) });
  const err = await c.next((f) => f.id === 'w2');
  assert.equal(err.type, 'error');
  assert.equal(err.code, 'bad_request');
  assert.match(err.message, /unsupported keyword 'minProperties'/);
  c.send({ type: 'chat', id: 'w3', messages: user('hi'), response_format: { type: 'json_schema' } });
  assert.match((await c.next((f) => f.id === 'w3')).message, /json_schema' must be an object/);
  c.send({ type: 'chat', id: 'w4', messages: user('hi'), response_format: format(schema), decoding: { edit_threshold: 0.5, pipeline: false } });
  assert.match((await c.next((f) => f.id === 'w4')).message, /token editing/);
  c.close();
});

// strings and numbers constrained character by character: garbage models, valid values
const TYPED = [
  { type: 'object', properties: { id: { type: 'string', pattern: '^[A-Z]{2}-\\d{4}$' }, at: { type: 'string', format: 'date-time' },
    note: { type: 'string', minLength: 3, maxLength: 12 } }, required: ['id', 'at', 'note'], additionalProperties: false },
  { type: 'object', properties: { qty: { type: 'integer', minimum: 1, maximum: 12 }, score: { type: 'number', minimum: 0, maximum: 1 },
    step: { type: 'number', multipleOf: 0.25, exclusiveMinimum: -1, exclusiveMaximum: 2 } }, required: ['qty', 'score', 'step'], additionalProperties: false },
  { type: 'array', items: { type: 'string', format: 'email' }, minItems: 1, maxItems: 2 },
  { type: 'object', properties: { day: { type: 'string', format: 'date' }, ip: { type: 'string', format: 'ipv4' },
    v6: { type: ['string', 'null'], format: 'ipv6' }, host: { type: 'string', format: 'hostname' }, u: { type: 'string', format: 'uuid' },
    t: { type: 'string', format: 'time' }, d: { type: 'string', format: 'duration' } },
    required: ['day', 'ip', 'v6', 'host', 'u', 't', 'd'], additionalProperties: false },
  { type: 'string', pattern: 'colou?r', maxLength: 20 },
  { type: 'integer', minimum: -40, maximum: -3, multipleOf: 3 },
  // what pydantic writes for HttpUrl, EmailStr and constr(max_length=200): lengths the
  // automaton counts (chains in the decoder), the long ones written shorter
  { type: 'object', properties: { site: { type: 'string', format: 'uri', minLength: 1, maxLength: 2083 },
    mail: { type: 'string', format: 'email', maxLength: 254 }, name: { type: 'string', maxLength: 200 } },
    required: ['site', 'mail', 'name'], additionalProperties: false },
  // pydantic's discriminated union (Field(discriminator='kind')): a oneOf of $refs told apart by
  // a tag, a type beside a oneOf of different types, a dict
  { $defs: { Refund: { type: 'object', properties: { kind: { const: 'refund', type: 'string' }, amount: { type: 'number', minimum: 0 } }, required: ['kind', 'amount'] },
    Ship: { type: 'object', properties: { kind: { enum: ['ship', 'resend'], type: 'string' }, to: { type: 'string', maxLength: 40 } }, required: ['kind', 'to'] } },
    type: 'object', properties: { action: { oneOf: [{ $ref: '#/$defs/Refund' }, { $ref: '#/$defs/Ship' }],
      discriminator: { propertyName: 'kind', mapping: { refund: '#/$defs/Refund', ship: '#/$defs/Ship', resend: '#/$defs/Ship' } } },
    ref: { type: ['string', 'integer'], oneOf: [{ type: 'string', pattern: '^[A-Z]{3}$' }, { type: 'number', minimum: 0 }, { type: 'null' }] },
    // Dict[str, constr(max_length=10)], Set[Literal['read', 'write', 'admin']]
    meta: { type: 'object', additionalProperties: { type: 'string', maxLength: 10 } },
    perms: { type: 'array', items: { enum: ['read', 'write', 'admin'], type: 'string' }, uniqueItems: true } },
    required: ['action', 'ref', 'meta', 'perms'] },
  // a recursive model (a thread of replies: class Msg(BaseModel): text: str; replies: List['Msg'])
  { $defs: { Msg: { type: 'object', properties: { text: { type: 'string', maxLength: 24 }, replies: { type: 'array', items: { $ref: '#/$defs/Msg' }, maxItems: 2 } },
    required: ['text', 'replies'] } }, $ref: '#/$defs/Msg' },
];

test('pattern, format, lengths, bounds and multipleOf: every reply is valid (ajv-formats)', async () => {
  const server = servers[0];
  const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const r = rng(4242);
  const seenTyped = new Set();
  for (const [i, schema] of TYPED.entries()) {
    for (let k = 0; k < 4; k++) {
      const temperature = k % 2 ? 0.9 : 0;
      const res = await client.chat.completions.create({ model: 'fogline', messages: user(pick(r, PROMPTS)), max_tokens: 400,
        temperature, seed: k, response_format: format(schema) });
      seenTyped.add(res.choices[0].message.content);
      // (valid also when max_tokens cut it: the decoder closes the value within the budget)
      check(schema, res.choices[0].message.content, `typed schema ${i} run ${k}`);
    }
  }
  assert.ok(seenTyped.size > TYPED.length, 'sampling varied the replies');
});

test('structured_outputs: regex and choice match the whole reply, json is a schema; bad ones are 400s', async () => {
  const server = servers[0];
  const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const cases = [
    ['^Order \\d{5} (shipped|is late)\\.$', /^Order \d{5} (shipped|is late)\.$/u],
    ['[a-z]{3,8}( [a-z]{3,8}){2}', /^[a-z]{3,8}( [a-z]{3,8}){2}$/u],
    ['(?:yes|no), because [^\\n.]{1,30}\\.', /^(?:yes|no), because [^\n.]{1,30}\.$/u],
    ['\\u{1F600}+ é\\d', /^\u{1F600}+ é\d$/u],
  ];
  for (const [pattern, re] of cases) {
    for (const temperature of [0, 0.9]) {
      const res = await client.chat.completions.create({ model: 'fogline', messages: user('Where is my order?'), max_tokens: 120,
        temperature, seed: 3, structured_outputs: { regex: pattern } });
      const text = res.choices[0].message.content;
      assert.match(text, re, `${pattern} at temperature ${temperature}`);
      assert.equal(res.choices[0].finish_reason, 'stop');
    }
  }
  const choice = ['shipped', 'pending', 'lost (a.k.a. "missing")', 'c++ [beta]'];
  const seen = new Set();
  for (let seed = 0; seed < 6; seed++) {
    const res = await client.chat.completions.create({ model: 'fogline', messages: user('Status?'), max_tokens: 40,
      temperature: 1, seed, structured_outputs: { choice } });
    assert.ok(choice.includes(res.choices[0].message.content), res.choices[0].message.content);
    seen.add(res.choices[0].message.content);
  }
  // streamed, and n choices: each one whole
  const stream = await client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 60, stream: true,
    structured_outputs: { regex: '\\d{3}-[a-f]{4}' } });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? '';
  assert.match(text, /^\d{3}-[a-f]{4}$/);
  const nres = await client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 40, n: 3, temperature: 1,
    structured_outputs: { choice } });
  assert.equal(nres.choices.length, 3);
  for (const c of nres.choices) assert.ok(choice.includes(c.message.content), c.message.content);
  // json: an object or its text, as response_format's json_schema
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } },
    required: ['ok', 'n'], additionalProperties: false };
  for (const json of [schema, JSON.stringify(schema)]) {
    const res = await client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 60,
      structured_outputs: { json } });
    check(schema, res.choices[0].message.content, 'structured_outputs.json');
  }
  // /v1/completions too (vLLM's), each prompt's choice whole
  const cmpl = await client.completions.create({ model: 'fogline', prompt: ['Order status:', 'Tracking id:'], max_tokens: 40,
    temperature: 0.9, seed: 5, structured_outputs: { regex: '[A-Z]{2}[0-9]{3}|late' } });
  assert.equal(cmpl.choices.length, 2);
  for (const ch of cmpl.choices) assert.match(ch.text, /^(?:[A-Z]{2}[0-9]{3}|late)$/, JSON.stringify(ch));
  // the WebSocket takes it too
  const c = await connect(server);
  c.send({ type: 'chat', id: 's1', messages: user('hi'), max_tokens: 60, structured_outputs: { regex: 'ID-[0-9]{4}' } });
  const frames = await c.collect('s1');
  assert.equal(frames.at(-1).type, 'done', JSON.stringify(frames.at(-1)));
  assert.match(frames.filter((f) => f.type === 'commit').map((f) => f.text).join(''), /^ID-[0-9]{4}$/);
  c.send({ type: 'chat', id: 's2', messages: user('hi'), structured_outputs: { regex: 'a(?!b)' } });
  const e2 = await c.next((f) => f.id === 's2');
  assert.equal(e2.type, 'error');
  assert.match(e2.message, /structured_outputs.*lookahead/);
  c.close();
  // bad inputs: 400 naming structured_outputs (or max_tokens), never a crash
  const bad = [
    [{ structured_outputs: 'x' }, 'structured_outputs', /must be an object/],
    [{ structured_outputs: {} }, 'structured_outputs', /exactly one of 'regex', 'choice', 'json'/],
    [{ structured_outputs: { regex: 'a', choice: ['a'] } }, 'structured_outputs', /exactly one/],
    [{ structured_outputs: { grammar: 'root ::= "a"' } }, 'structured_outputs', /unknown field 'grammar'/],
    [{ structured_outputs: { regex: 5 } }, 'structured_outputs', /regex' must be a string/],
    // (a NUL would cut the pattern's C string: the body is refused before that)
    [{ structured_outputs: { regex: 'a\u0000b' } }, null, /\\u0000 is not allowed/],
    [{ structured_outputs: { choice: [] } }, 'structured_outputs', /array of 1\.\.256 strings/],
    [{ structured_outputs: { choice: ['a', 3] } }, 'structured_outputs', /array of 1\.\.256 strings/],
    [{ structured_outputs: { json: '{"type":' } }, 'structured_outputs', /is not JSON/],
    [{ structured_outputs: { json: 3 } }, 'structured_outputs', /must be a JSON schema/],
    [{ structured_outputs: { regex: 'a' }, response_format: { type: 'json_object' } }, 'structured_outputs', /cannot be combined/],
    [{ structured_outputs: { regex: '(a' } }, 'structured_outputs', /unterminated group/],
    [{ structured_outputs: { regex: 'a\\1' } }, 'structured_outputs', /backreference/],
    [{ structured_outputs: { regex: '[]' } }, 'structured_outputs', /matches no text/],
    [{ structured_outputs: { json: { type: 'string', format: 'uri-reference' } } }, 'structured_outputs', /'format': 'uri-reference' is an unsupported format/],
    [{ structured_outputs: { regex: 'x{30}' }, max_tokens: 2 }, 'max_tokens', /the shortest reply structured_outputs allows takes \d+ tokens; max_tokens is 2/],
    [{ structured_outputs: { regex: 'x' }, decoding: { edit_threshold: 0.5, pipeline: false } }, 'structured_outputs', /token editing/],
    [{ structured_outputs: { regex: 'x' }, min_tokens: 2 }, 'min_tokens', /'min_tokens' cannot be combined with 'structured_outputs'/],
  ];
  for (const [extra, param, re] of bad) {
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fogline', messages: user('hi'), ...extra }) });
    const body = await res.json();
    assert.equal(res.status, 400, `${JSON.stringify(extra)}: ${JSON.stringify(body)}`);
    assert.equal(body.error.param, param, `${JSON.stringify(extra)}: ${JSON.stringify(body)}`);
    assert.match(body.error.message, re, `${JSON.stringify(extra)}`);
  }
});
