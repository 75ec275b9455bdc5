// logit_bias (OpenAI's: token id -> bias in [-100, 100]) and vLLM's min_tokens and ignore_eos on
// /v1/chat/completions, /v1/completions and the WebSocket chat (docs/protocol.md), with the
// official `openai` client.
// That the engine adds the biases to every deciding row before anything reads it is checked
// against the PyTorch reference by decode.parity_logprobs (the trace replayed with the biases);
// here, that the server hands them on: a ban and several biases decode exactly as
// `fogline generate --logit-bias` does, a +100 token fills the reply (and its log probability
// is 0), streamed chunks add up to the plain answer, every choice of n and every prompt of a
// batch takes the biases, the WebSocket chat too; and every bad value is a 400 (an error frame)
// naming logit_bias. min_tokens and ignore_eos (the end tokens banned from the first positions),
// and presence_penalty and frequency_penalty (checked on the reference by
// decode.parity_logprobs too), decode as `fogline generate` does with the same flags, on every
// transport, with their bad values.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startServer, connect, require, BIN, MODEL } from './lib.mjs';

const OpenAI = require('openai').default;
const DIR = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
const VOCAB = JSON.parse(readFileSync(`${DIR}/config.json`, 'utf8')).vocab_size;
const Q = 'Where is my order 48213? How long does express shipping take?';
const msgs = [{ role: 'user', content: Q }];

let server;
let client;
let plain; // the unbiased greedy reply, from the CLI
let banned; // its most frequent token
let boosted; // another of its tokens, made the only choice by +100
let filled; // that token 8 times, as text

before(async () => {
  server = await startServer(['--max-tokens', '48']);
  client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  plain = generate();
  const count = new Map();
  for (const t of plain.ids) count.set(t, (count.get(t) ?? 0) + 1);
  banned = [...count.entries()].sort((a, b) => b[1] - a[1] || a[0] - b[0])[0][0];
  boosted = plain.ids.find((t) => t !== banned && t !== plain.ids[0]);
  filled = await detokenize(Array(8).fill(boosted));
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

// `fogline generate` for the same question, greedy, with the biases as --logit-bias
function generate(bias = {}, maxTokens = 48, more = []) {
  const args = ['generate', '--model', DIR, '--json', '--prompt', Q, '--max-tokens', String(maxTokens),
    '--temperature', '0', '--threads', '2', ...more];
  const pairs = Object.entries(bias).map(([t, b]) => `${t}:${b}`);
  if (pairs.length) args.push('--logit-bias', pairs.join(','));
  const r = spawnSync(BIN, args, { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

const post = async (path, body) => {
  const res = await fetch(`${server.url}${path}`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};

async function detokenize(tokens) {
  const r = await post('/detokenize', { tokens });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.prompt;
}

test('chat completions: a ban and mixed biases decode as `fogline generate --logit-bias`', async () => {
  for (const bias of [{ [banned]: -100 }, { [banned]: -100, [boosted]: 2.5, 7: -3 }, { [plain.ids[0]]: -30.25 }]) {
    const want = generate(bias);
    const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
      logit_bias: bias });
    assert.equal(r.choices[0].message.content, want.text, JSON.stringify(bias));
    assert.notEqual(want.text, plain.text, `test data: ${JSON.stringify(bias)} changes the reply`);
    if (bias[banned] === -100) assert.ok(!want.ids.includes(banned), JSON.stringify(want.ids));
    // streamed: the chunks add up to it
    let text = '';
    for await (const ch of await client.chat.completions.create({ model: 'fogline', messages: msgs,
      temperature: 0, logit_bias: bias, stream: true }))
      text += ch.choices[0]?.delta?.content ?? '';
    assert.equal(text, want.text, `streamed ${JSON.stringify(bias)}`);
  }
  // null and {} are no bias
  for (const logit_bias of [null, {}]) {
    const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
      logit_bias });
    assert.equal(r.choices[0].message.content, plain.text, JSON.stringify(logit_bias));
  }
});

test('+100 makes a token the only choice, even sampled, in every choice of n; its logprob is 0', async () => {
  const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, max_tokens: 8,
    temperature: 1.3, seed: 3, n: 3, logit_bias: { [boosted]: 100 }, logprobs: true });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.equal(c.message.content, filled, `choice ${c.index}`);
    assert.equal(c.logprobs.content.length, 8);
    for (const e of c.logprobs.content) assert.ok(e.logprob > -1e-4, `choice ${c.index}: ${e.logprob}`);
  }
  // without the bias the same samples differ from it
  const free = await client.chat.completions.create({ model: 'fogline', messages: msgs, max_tokens: 8,
    temperature: 1.3, seed: 3, n: 3 });
  for (const c of free.choices) assert.notEqual(c.message.content, filled, `test data: choice ${c.index}`);
});

test('/v1/completions: the same biases on the rendered prompt, for every prompt of a batch', async () => {
  const tk = await post('/tokenize', { messages: msgs });
  assert.equal(tk.status, 200);
  const bias = { [banned]: -100, [boosted]: 2.5, 7: -3 };
  const want = generate(bias).text;
  const r = await client.completions.create({ model: 'fogline', prompt: [tk.json.prompt, tk.json.tokens],
    temperature: 0, logit_bias: bias });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) assert.equal(c.text, want, `prompt ${c.index}`);
  const one = await client.completions.create({ model: 'fogline', prompt: tk.json.prompt, temperature: 0 });
  assert.equal(one.choices[0].text, plain.text);
});

// a WebSocket reply's text: its commits' (the done frame carries none)
const wsText = (frames) => frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');

test('the WebSocket chat takes logit_bias', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'b', messages: msgs, temperature: 0, max_tokens: 8, logit_bias: { [boosted]: 100 } });
  const frames = await c.collect('b');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.equal(wsText(frames), filled);
  const bias = { [banned]: -100 };
  c.send({ type: 'chat', id: 'ban', messages: msgs, temperature: 0, logit_bias: bias });
  assert.equal(wsText(await c.collect('ban')), generate(bias).text);
  c.close();
});

test('bad logit_bias: 400s (error frames) naming the field', async () => {
  const many = Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1]));
  const cases = [
    ['x', 'bad_request', /must be an object of token ids to biases/],
    [[1, 2], 'bad_request', /must be an object/],
    [5, 'bad_request', /must be an object/],
    [{ abc: 1 }, 'bad_request', /key "abc" is not a token id/],
    [{ '-1': 1 }, 'bad_request', /key "-1" is not a token id/],
    [{ '01': 1 }, 'bad_request', /key "01" is not a token id/],
    [{ '1.5': 1 }, 'bad_request', /key "1.5" is not a token id/],
    [{ '': 1 }, 'bad_request', /key "" is not a token id/],
    [{ ' 1': 1 }, 'bad_request', /key " 1" is not a token id/],
    [{ 12345678901: 1 }, 'bad_request', /key "12345678901" is not a token id/],
    [{ 4294967296: 1 }, 'out_of_range', /names token 4294967296, outside the vocabulary/],
    [{ [VOCAB]: 1 }, 'out_of_range', new RegExp(`names token ${VOCAB}, outside the vocabulary \\(${VOCAB} ids\\)`)],
    [{ 5: '1' }, 'bad_request', /value for token 5 must be a number/],
    [{ 5: null }, 'bad_request', /value for token 5 must be a number/],
    [{ 5: true }, 'bad_request', /value for token 5 must be a number/],
    [{ 5: 101 }, 'out_of_range', /value for token 5 must be in \[-100, 100\], got 101/],
    [{ 5: -100.5 }, 'out_of_range', /value for token 5 must be in \[-100, 100\], got -100.5/],
    [many, 'out_of_range', /names 1025 tokens; at most 1024/],
  ];
  for (const [logit_bias, code, re] of cases) {
    const what = JSON.stringify(logit_bias).slice(0, 80);
    for (const [path, body] of [['/v1/chat/completions', { messages: msgs }], ['/v1/completions', { prompt: Q }]]) {
      const r = await post(path, { ...body, logit_bias });
      assert.equal(r.status, 400, `${path} ${what}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error.code, code, `${path} ${what}`);
      assert.equal(r.json.error.param, 'logit_bias', `${path} ${what}`);
      assert.match(r.json.error.message, re, `${path} ${what}`);
    }
  }
  const c = await connect(server);
  for (const [logit_bias, code, re] of cases) {
    c.send({ type: 'chat', id: 'bad', messages: msgs, logit_bias });
    const [e] = await c.collect('bad');
    assert.equal(e.type, 'error', JSON.stringify(e));
    assert.equal(e.code, code, JSON.stringify(logit_bias).slice(0, 80));
    assert.match(e.message, re, JSON.stringify(logit_bias).slice(0, 80));
  }
  // the connection and the server are whole after them
  c.send({ type: 'chat', id: 'ok', messages: msgs, temperature: 0 });
  assert.equal(wsText(await c.collect('ok')), plain.text);
  c.close();
});

test('min_tokens and ignore_eos: no end token before them, as `fogline generate` decodes them', async () => {
  assert.equal(plain.finish, 'stop');
  assert.ok(plain.ids.length < 40, `test data: the reply ends early (${plain.ids.length} tokens)`);
  const atLeast = generate({}, 48, ['--min-tokens', '40']);
  const all = generate({}, 48, ['--ignore-eos']);
  assert.ok(atLeast.ids.length >= 40, `${atLeast.ids.length}`);
  assert.equal(all.ids.length, 48);
  assert.equal(all.finish, 'length');
  const chat = (extra) => client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0, ...extra });
  let r = await chat({ min_tokens: 40 });
  assert.equal(r.choices[0].message.content, atLeast.text);
  assert.ok(r.usage.completion_tokens >= 40, `${r.usage.completion_tokens}`);
  r = await chat({ ignore_eos: true });
  assert.equal(r.choices[0].message.content, all.text);
  assert.equal(r.usage.completion_tokens, 48);
  assert.equal(r.choices[0].finish_reason, 'length');
  // every choice; min_tokens 0 and ignore_eos false are the plain reply
  r = await chat({ ignore_eos: true, n: 2, temperature: 1, seed: 9, max_tokens: 40 });
  for (const c of r.choices) assert.equal(c.finish_reason, 'length', `choice ${c.index}`);
  assert.equal(r.usage.completion_tokens, 80);
  r = await chat({ min_tokens: 0, ignore_eos: false });
  assert.equal(r.choices[0].message.content, plain.text);
  // text completions and the WebSocket
  const tk = await post('/tokenize', { messages: msgs });
  const t = await client.completions.create({ model: 'fogline', prompt: tk.json.prompt, temperature: 0,
    ignore_eos: true });
  assert.equal(t.choices[0].text, all.text);
  assert.equal(t.choices[0].finish_reason, 'length');
  const c = await connect(server);
  c.send({ type: 'chat', id: 'm', messages: msgs, temperature: 0, min_tokens: 40 });
  const frames = await c.collect('m');
  assert.equal(wsText(frames), atLeast.text);
  assert.ok(frames.at(-1).usage.completion_tokens >= 40);
  for (const [extra, code, param, re] of [
    [{ min_tokens: -1 }, 'out_of_range', 'min_tokens', /min_tokens/],
    [{ min_tokens: 1.5 }, 'bad_request', 'min_tokens', /integer/],
    [{ min_tokens: '4' }, 'bad_request', 'min_tokens', /min_tokens/],
    [{ min_tokens: 49 }, 'out_of_range', 'min_tokens', /'min_tokens' \(49\) must not exceed max_tokens \(48\)/],
    [{ min_tokens: 10, max_tokens: 8 }, 'out_of_range', 'min_tokens', /must not exceed max_tokens \(8\)/],
    [{ ignore_eos: 'yes' }, 'bad_request', 'ignore_eos', /true or false/],
    [{ ignore_eos: 1 }, 'bad_request', 'ignore_eos', /true or false/],
    [{ min_tokens: 4, response_format: { type: 'json_object' } }, 'bad_request', 'min_tokens',
      /'min_tokens' cannot be combined with 'response_format': a constrained reply ends with an end token/],
    [{ ignore_eos: true, response_format: { type: 'json_object' } }, 'bad_request', 'ignore_eos',
      /'ignore_eos' cannot be combined with 'response_format'/],
  ]) {
    const what = JSON.stringify(extra);
    const h = await post('/v1/chat/completions', { messages: msgs, ...extra });
    assert.equal(h.status, 400, `${what}: ${JSON.stringify(h.json)}`);
    assert.equal(h.json.error.code, code, what);
    assert.equal(h.json.error.param, param, what);
    assert.match(h.json.error.message, re, what);
    if (!extra.response_format) {
      const tc = await post('/v1/completions', { prompt: Q, ...extra });
      assert.equal(tc.status, 400, `completions ${what}`);
      assert.equal(tc.json.error.param, param, `completions ${what}`);
    }
    c.send({ type: 'chat', id: 'bad', messages: msgs, ...extra });
    const [e] = await c.collect('bad');
    assert.equal(e.type, 'error', `ws ${what}: ${JSON.stringify(e)}`);
    assert.equal(e.code, code, `ws ${what}`);
    assert.match(e.message, re, `ws ${what}`);
  }
  c.close();
});

test('presence_penalty and frequency_penalty decode as `fogline generate` with the same penalties', async () => {
  const all = generate({}, 48, ['--ignore-eos']);
  const pen = generate({}, 48, ['--ignore-eos', '--frequency-penalty', '2', '--presence-penalty', '0.5']);
  assert.notEqual(pen.text, all.text, 'test data: the penalties change the reply');
  const body = { model: 'fogline', messages: msgs, temperature: 0, ignore_eos: true, frequency_penalty: 2,
    presence_penalty: 0.5 };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices[0].message.content, pen.text);
  // zero is no penalty
  const zero = await client.chat.completions.create({ ...body, frequency_penalty: 0, presence_penalty: 0 });
  assert.equal(zero.choices[0].message.content, all.text);
  const tk = await post('/tokenize', { messages: msgs });
  const t = await client.completions.create({ model: 'fogline', prompt: tk.json.tokens, temperature: 0,
    ignore_eos: true, frequency_penalty: 2, presence_penalty: 0.5 });
  assert.equal(t.choices[0].text, pen.text);
  const c = await connect(server);
  c.send({ type: 'chat', id: 'p', messages: msgs, temperature: 0, ignore_eos: true, frequency_penalty: 2,
    presence_penalty: 0.5 });
  assert.equal(wsText(await c.collect('p')), pen.text);
  for (const [extra, code, re] of [
    [{ presence_penalty: 2.5 }, 'out_of_range', /'presence_penalty' must be in \[-2, 2\], got 2.5/],
    [{ frequency_penalty: -3 }, 'out_of_range', /'frequency_penalty' must be in \[-2, 2\], got -3/],
    [{ frequency_penalty: 'x' }, 'bad_request', /'frequency_penalty' must be a number/],
  ]) {
    const param = Object.keys(extra)[0];
    for (const [path, b] of [['/v1/chat/completions', { messages: msgs }], ['/v1/completions', { prompt: Q }]]) {
      const h = await post(path, { ...b, ...extra });
      assert.equal(h.status, 400, `${path} ${JSON.stringify(extra)}`);
      assert.equal(h.json.error.code, code);
      assert.equal(h.json.error.param, param);
      assert.match(h.json.error.message, re);
    }
    c.send({ type: 'chat', id: 'bad', messages: msgs, ...extra });
    const [e] = await c.collect('bad');
    assert.equal(e.type, 'error', JSON.stringify(e));
    assert.match(e.message, re);
  }
  c.close();
});
