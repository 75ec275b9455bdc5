// POST /v1/completions (docs/protocol.md) with the official `openai` npm client: a prompt given
// as the chat template's rendered text, or as its token ids (from `fogline tokenize`), decodes
// to exactly the reply /v1/chat/completions gives for those messages; streamed chunks add up to
// the plain answer; stop strings; n > 1 samples (here and on chat completions) and batches of
// prompts: choice i of a prompt is that prompt alone with seed + i, the choices share the
// prompt's KV pages; and every bad input as an OpenAI-shaped error with its status.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer, require, BIN, MODEL } from './lib.mjs';

const OpenAI = require('openai').default;
const KEY = 'sk-cmpl-1';
const AUTH = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };

let server;
let client;

before(async () => {
  server = await startServer(['--api-key', KEY, '--max-prompt-tokens', '96',
    '--max-tokens-limit', '128', '--max-tokens', '64']);
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

// The prompt as the server builds it for one user message: its text and its token ids.
function rendered(content) {
  const model = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
  const run = (extra) => {
    const r = spawnSync(BIN, ['tokenize', '--model', model, '--chat', ...extra,
      '--add-generation-prompt', '--no-thinking'],
    { input: JSON.stringify([{ role: 'user', content }]) + '\n', encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout.trim());
  };
  return { text: run([]), ids: run(['--ids']) };
}

async function post(body) {
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: AUTH,
    body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* the test says what it wanted */ }
  return { status: res.status, json, text };
}

const QUESTIONS = ['my password expired', 'where is my order 48213', 'the printer says paper jam'];

test('a rendered prompt, as text or as ids, decodes to the chat reply for its messages', async () => {
  for (const q of QUESTIONS) {
    const chat = await client.chat.completions.create({
      model: 'fogline', messages: [{ role: 'user', content: q }], max_tokens: 40, temperature: 0 });
    const want = chat.choices[0].message.content;
    assert.ok(want.length > 0, q);
    const p = rendered(q);
    const a = await client.completions.create({ model: 'fogline', prompt: p.text, max_tokens: 40,
      temperature: 0 });
    assert.equal(a.object, 'text_completion');
    assert.match(a.id, /^cmpl-/);
    assert.equal(a.choices.length, 1);
    assert.equal(a.choices[0].index, 0);
    assert.equal(a.choices[0].logprobs, null);
    assert.equal(a.choices[0].text, want, `text prompt: ${q}`);
    assert.equal(a.choices[0].finish_reason, chat.choices[0].finish_reason);
    // (the chat's prompt pages are cached by now: cached_tokens may differ)
    assert.equal(a.usage.prompt_tokens, chat.usage.prompt_tokens, `prompt tokens: ${q}`);
    assert.equal(a.usage.completion_tokens, chat.usage.completion_tokens, `reply tokens: ${q}`);
    const b = await client.completions.create({ model: 'fogline', prompt: p.ids, max_tokens: 40,
      temperature: 0 });
    assert.equal(b.choices[0].text, want, `id prompt: ${q}`);
    assert.equal(b.usage.prompt_tokens, p.ids.length);
    // a batch of one prompt is that prompt
    const c = await client.completions.create({ model: 'fogline', prompt: [p.ids], max_tokens: 40,
      temperature: 0 });
    assert.equal(c.choices[0].text, want, `[ids]: ${q}`);
  }
});

test('streamed: text chunks add up to the plain answer, one finish reason, usage, [DONE]', async () => {
  const prompt = rendered(QUESTIONS[1]).text;
  const plain = await client.completions.create({ model: 'fogline', prompt, max_tokens: 48,
    temperature: 0 });
  const stream = await client.completions.create({ model: 'fogline', prompt, max_tokens: 48,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3, `got ${chunks.length} chunks`);
  assert.ok(chunks.every((c) => c.object === 'text_completion' && c.id === chunks[0].id));
  assert.match(chunks[0].id, /^cmpl-/);
  const text = chunks.map((c) => c.choices[0]?.text ?? '').join('');
  assert.equal(text, plain.choices[0].text);
  const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(fin[0].choices[0].finish_reason, plain.choices[0].finish_reason);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.equal(last.usage.completion_tokens, plain.usage.completion_tokens);
  // the raw stream ends with [DONE]
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: AUTH,
    body: JSON.stringify({ prompt, max_tokens: 8, stream: true }) });
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  assert.match(await res.text(), /data: \[DONE\]\n\n$/);
});

test('a stop string ends the text before it', async () => {
  const prompt = rendered(QUESTIONS[0]).text;
  const full = (await client.completions.create({ model: 'fogline', prompt, max_tokens: 40,
    temperature: 0 })).choices[0].text;
  const words = full.trim().split(/\s+/);
  assert.ok(words.length >= 3, `a reply long enough to cut: ${full}`);
  const stop = ' ' + words[2];
  const cut = full.indexOf(stop);
  assert.ok(cut > 0, `${stop} in ${full}`);
  const r = await client.completions.create({ model: 'fogline', prompt, max_tokens: 40,
    temperature: 0, stop: [stop] });
  assert.equal(r.choices[0].text, full.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

// Three samples that differ at this temperature (checked below: a mix-up of seeds would show).
const SAMPLED = 'what can you do';
const HOT = { max_tokens: 32, temperature: 1.2, seed: 11 };

test('n samples: choice i is the request alone with seed + i; they share the prompt pages', async () => {
  const B = (await client.models.list()).data[0].block_size;
  const p = rendered(SAMPLED);
  const P = p.ids.length;
  assert.ok(P % B !== 0 && P > B, `test data: a prompt of ${P} tokens, not whole blocks of ${B}`);
  // the group first, so that its branches compute the prompt (nothing cached yet)
  const many = await client.completions.create({ model: 'fogline', prompt: p.text, ...HOT, n: 3,
    best_of: 3 });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(many.usage.prompt_tokens, 3 * P);
  // one branch computes the prompt's whole blocks, the other two take them from the cache
  assert.equal(many.usage.prompt_tokens_details.cached_tokens, 2 * Math.floor(P / B) * B);
  let completion = 0;
  const alone = [];
  for (let i = 0; i < 3; i++) {
    const one = await client.completions.create({ model: 'fogline', prompt: p.text, ...HOT,
      seed: HOT.seed + i });
    alone.push(one.choices[0].text);
    assert.equal(many.choices[i].text, one.choices[0].text, `choice ${i}`);
    assert.equal(many.choices[i].finish_reason, one.choices[0].finish_reason, `choice ${i}`);
    completion += one.usage.completion_tokens;
  }
  assert.equal(new Set(alone).size, 3, `test data: three different samples: ${alone}`);
  assert.equal(many.usage.completion_tokens, completion);
  // streamed: each choice's chunks add up to its text, one finish each, usage at the end
  const stream = await client.completions.create({ model: 'fogline', prompt: p.ids, ...HOT, n: 3,
    stream: true, stream_options: { include_usage: true } });
  const text = ['', '', ''];
  const fin = [0, 0, 0];
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text[c.index] += c.text;
      if (c.finish_reason) fin[c.index]++;
    }
  }
  assert.deepEqual(text, alone);
  assert.deepEqual(fin, [1, 1, 1]);
  assert.equal(usage.completion_tokens, completion);
  // chat completions take n the same way
  const msgs = [{ role: 'user', content: SAMPLED }];
  const chat = await client.chat.completions.create({ model: 'fogline', messages: msgs, ...HOT, n: 2 });
  assert.deepEqual(chat.choices.map((c) => [c.index, c.message.role, c.message.content]),
    [[0, 'assistant', alone[0]], [1, 'assistant', alone[1]]]);
  const cs = await client.chat.completions.create({ model: 'fogline', messages: msgs, ...HOT, n: 2,
    stream: true });
  const ct = ['', ''];
  const roles = [[], []];
  for await (const ch of cs)
    for (const c of ch.choices) {
      ct[c.index] += c.delta.content ?? '';
      roles[c.index].push(c.delta.role ?? null);
    }
  assert.deepEqual(ct, alone.slice(0, 2));
  // as OpenAI streams n choices: each choice's first chunk, and only that one, says its role
  for (const r of roles) assert.deepEqual([r[0], r.filter((x) => x).length], ['assistant', 1]);
  // each choice keeps the response format, as the request alone with its seed
  const fmt = { messages: msgs, ...HOT, max_tokens: 64, response_format: { type: 'json_object' } };
  const js = await client.chat.completions.create({ model: 'fogline', ...fmt, n: 2 });
  for (const c of js.choices) {
    const one = await client.chat.completions.create({ model: 'fogline', ...fmt,
      seed: HOT.seed + c.index });
    assert.equal(c.message.content, one.choices[0].message.content, `json choice ${c.index}`);
    if (c.finish_reason === 'stop') JSON.parse(c.message.content);
  }
});

test('a batch of prompts: each prompt its n choices in order, each as that prompt alone', async () => {
  // (after the samples' test: it needs their prompt uncached)
  const a = rendered(SAMPLED), b = rendered(QUESTIONS[2]);
  const many = await client.completions.create({ model: 'fogline', prompt: [a.text, b.ids], ...HOT,
    n: 2 });
  assert.equal(many.choices.length, 4);
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2, 3]);
  let completion = 0;
  for (const [k, p] of [a.text, b.ids].entries())
    for (let j = 0; j < 2; j++) {
      const one = await client.completions.create({ model: 'fogline', prompt: p, ...HOT,
        seed: HOT.seed + j });
      assert.equal(many.choices[2 * k + j].text, one.choices[0].text, `prompt ${k} choice ${j}`);
      completion += one.usage.completion_tokens;
    }
  assert.equal(many.usage.prompt_tokens, 2 * (a.ids.length + b.ids.length));
  assert.equal(many.usage.completion_tokens, completion);
  // streamed, the same texts under the same indices
  const stream = await client.completions.create({ model: 'fogline', prompt: [a.ids, b.text],
    ...HOT, n: 2, stream: true });
  const text = ['', '', '', ''];
  for await (const ch of stream) for (const c of ch.choices) text[c.index] += c.text;
  assert.deepEqual(text, many.choices.map((c) => c.text));
});

test('every bad input is an OpenAI-shaped error with its status and param', async () => {
  const cases = [
    [{}, 400, 'bad_request', 'prompt', /'prompt' is required/],
    [{ prompt: '' }, 400, 'bad_request', 'prompt', /must not be empty/],
    [{ prompt: [] }, 400, 'bad_request', 'prompt', /must not be empty/],
    [{ prompt: [[]] }, 400, 'bad_request', 'prompt', /'prompt\[0\]' must not be empty/],
    [{ prompt: Array(65).fill('a') }, 400, 'out_of_range', 'prompt', /holds 65 prompts; at most 64/],
    [{ prompt: Array(9).fill('a'), n: 8 }, 400, 'out_of_range', 'prompt', /9 prompts times n 8 is 72 choices; at most 64/],
    [{ prompt: ['a', ''] }, 400, 'bad_request', 'prompt', /'prompt\[1\]' must not be empty/],
    [{ prompt: ['a', 7] }, 400, 'bad_request', 'prompt', /'prompt\[1\]' must be a string/],
    [{ prompt: [[1], [2, -3]] }, 400, 'bad_request', 'prompt', /prompt\[1\]\[1\] must be a token id/],
    [{ prompt: ['hi', 'x'.repeat(400)] }, 400, 'context_length_exceeded', 'prompt', /^prompt\[1\]: the prompt has \d+ tokens; the limit is 96/],
    [{ prompt: [[5], [6, 99999999]], n: 2 }, 400, 'bad_request', 'prompt', /^prompt\[1\]: token id 99999999 at 1 is outside/],
    [{ prompt: [5, 'x'] }, 400, 'bad_request', 'prompt', /prompt\[1\] must be a token id/],
    [{ prompt: [-1] }, 400, 'bad_request', 'prompt', /prompt\[0\] must be a token id/],
    [{ prompt: [1.5] }, 400, 'bad_request', 'prompt', /prompt\[0\] must be a token id/],
    [{ prompt: [2147483648] }, 400, 'bad_request', 'prompt', /must be a token id/],
    [{ prompt: [7, 99999999] }, 400, 'bad_request', 'prompt', /token id 99999999 at 1 is outside the vocabulary/],
    [{ prompt: 42 }, 400, 'bad_request', 'prompt', /must be a string, an array of token ids/],
    [{ prompt: [] }, 400, 'bad_request', 'prompt', /'prompt' must not be empty/],
    [{ prompt: { text: 'x' } }, 400, 'bad_request', 'prompt', /must be a string/],
    [{ prompt: 'a\u0000b' }, 400, 'bad_json', null, /NUL/], // jansson refuses it first
    [{ prompt: 'x'.repeat(400) }, 400, 'context_length_exceeded', 'prompt', /tokens; the limit is 96/],
    [{ prompt: 'hi', n: 17 }, 400, 'out_of_range', 'n', /'n' must be in \[1, 16\]/],
    [{ prompt: 'hi', n: 0 }, 400, 'out_of_range', 'n', /'n' must be in \[1, 16\]/],
    [{ prompt: 'hi', best_of: 3 }, 400, 'out_of_range', 'best_of', /'best_of' must equal 'n' \(1\), got 3/],
    [{ prompt: 'hi', n: 2, best_of: 4 }, 400, 'out_of_range', 'best_of', /must equal 'n' \(2\)/],
    [{ prompt: 'x'.repeat(400), n: 3 }, 400, 'context_length_exceeded', 'prompt', /tokens; the limit is 96/],
    [{ prompt: 'hi', echo: true }, 400, 'bad_request', 'echo', /'echo' is not supported/],
    [{ prompt: 'hi', echo: 'yes' }, 400, 'bad_request', 'echo', /true or false/],
    [{ prompt: 'hi', logprobs: true }, 400, 'bad_request', 'logprobs', /'logprobs' must be an integer/],
    [{ prompt: 'hi', logprobs: 21 }, 400, 'out_of_range', 'logprobs', /\[0, 20\], got 21/],
    [{ prompt: 'hi', suffix: 'end' }, 400, 'bad_request', 'suffix', /not supported/],
    [{ prompt: 'hi', messages: [] }, 400, 'bad_request', 'messages', /belongs to \/v1\/chat\/completions/],
    [{ prompt: 'hi', response_format: { type: 'json_object' } }, 400, 'bad_request', 'response_format', /belongs to/],
    [{ prompt: 'hi', max_tokens: 0 }, 400, 'out_of_range', 'max_tokens', /max_tokens/],
    [{ prompt: 'hi', max_tokens: 129 }, 400, 'out_of_range', 'max_tokens', /128/],
    [{ prompt: 'hi', temperature: 3 }, 400, 'out_of_range', 'temperature', /temperature/],
    [{ prompt: 'hi', stop: 7 }, 400, 'bad_request', 'stop', /stop/],
    [{ prompt: 'hi', stream: 'yes' }, 400, 'bad_request', 'stream', /true or false/],
    [{ prompt: 'hi', decoding: { policy: 'magic' } }, 400, 'out_of_range', 'decoding.policy', /magic/],
    [{ prompt: 'hi', model: 'gpt-4' }, 404, 'model_not_found', 'model', /does not exist/],
    ['{"prompt":', 400, 'bad_json', null, /not valid JSON/],
    ['[1,2]', 400, 'bad_request', null, /JSON object/],
  ];
  for (const [body, status, code, param, msg] of cases) {
    const r = await post(body);
    const what = JSON.stringify(body).slice(0, 60);
    assert.equal(r.status, status, `${what}: ${r.text}`);
    assert.ok(r.json?.error, `${what}: ${r.text}`);
    assert.equal(r.json.error.code, code, `${what}: ${r.text}`);
    assert.equal(r.json.error.param, param, what);
    assert.equal(r.json.error.type, status === 404 ? 'not_found_error' : 'invalid_request_error',
      what);
    assert.match(r.json.error.message, msg, what);
  }
  // n above 1 with what has no single reply, on chat completions
  const chat = async (body) => {
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: AUTH,
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], ...body }) });
    return { status: res.status, json: await res.json() };
  };
  const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
  for (const [body, with_] of [[{ session: 's1' }, 'session'],
    [{ parallel: { mode: 'fanout', segments: ['a', 'b'] } }, 'parallel']]) {
    const r = await chat({ n: 2, ...body });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal(r.json.error.param, 'n');
    assert.equal(r.json.error.message, `'n' above 1 cannot be combined with '${with_}'`);
  }
  // tools with n: refused by this model's template as the lone request is (no tool syntax)
  const lone = await chat({ tools: [tool] }), two = await chat({ n: 2, tools: [tool] });
  assert.equal(lone.status, 400, JSON.stringify(lone.json));
  assert.deepEqual(two, lone);
  const long = await chat({ n: 2, messages: [{ role: 'user', content: 'x'.repeat(400) }] });
  assert.equal(long.status, 400);
  assert.equal(long.json.error.code, 'context_length_exceeded');
  assert.equal(long.json.error.param, 'messages');
  // the same refusals through the client: a missing key, a wrong method
  const anon = new OpenAI({ apiKey: 'wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(anon.completions.create({ model: 'fogline', prompt: 'hi' }),
    (e) => e.status === 401 && e.code === 'invalid_api_key');
  const g = await fetch(`${server.url}/v1/completions`, { headers: AUTH });
  assert.equal(g.status, 405);
  assert.equal((await g.json()).error.code, 'method_not_allowed');
  // the server still answers after all of them
  const ok = await client.completions.create({ model: 'fogline', prompt: 'hello', max_tokens: 4 });
  assert.equal(ok.object, 'text_completion');
});
