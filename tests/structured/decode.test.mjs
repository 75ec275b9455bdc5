// Constrained denoising end to end (engine/cdecode.c through `fogline serve`): random tiny
// models of each layout, which say garbage unconstrained, must answer every response_format
// with a valid value, checked by npm ajv (a real JSON Schema validator) and JSON.parse:
// - random schemas of the subset (tests/structured/gen.mjs) x random prompts, over the
//   official openai client, greedy and sampled, at max_tokens exactly the constraint's
//   minimum (learnt from the server's own refusal of max_tokens 1) and above it;
// - every unmasking policy (threshold, static, dynamic, entropy, sequential);
// - json_object and a schema streamed; over the WebSocket, the commits add up to a valid value.
// FL_STRUCT_MODELS: a directory with q3 (SDAR layout) and q2 (Fast-dLLM v2: shifted logits,
// sub-blocks); FL_LLADA2_MODEL: a LLaDA2 MoE (its own stand-in tokenizer, vocabulary 157184).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, require, user, connect } from '../server/lib.mjs';
import { rng, pick, genSchema } from './gen.mjs';

const OpenAI = require('openai').default;
const Ajv = require('ajv');
const ajv = new Ajv({ strict: false });

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
  c.send({ type: 'chat', id: 'w2', messages: user('hi'), response_format: format({ type: 'string', minLength: 3 }) });
  const err = await c.next((f) => f.id === 'w2');
  assert.equal(err.type, 'error');
  assert.equal(err.code, 'bad_request');
  assert.match(err.message, /unsupported keyword 'minLength'/);
  c.send({ type: 'chat', id: 'w3', messages: user('hi'), response_format: { type: 'json_schema' } });
  assert.match((await c.next((f) => f.id === 'w3')).message, /json_schema' must be an object/);
  c.send({ type: 'chat', id: 'w4', messages: user('hi'), response_format: format(schema), decoding: { edit_threshold: 0.5, pipeline: false } });
  assert.match((await c.next((f) => f.id === 'w4')).message, /token editing/);
  c.close();
});
