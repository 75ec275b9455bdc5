// POST /generate, the deployment guide's endpoint (docs/protocol.md): {"segments": [...]} ->
// {"output": [...]}, one reply per segment, generated together as one fan-out.
//   - each output equals its segment alone on /v1/chat/completions at temperature 0 (the
//     official openai client), in segment order: fan-out costs nothing in quality;
//   - segments with a common start share those KV pages: /metrics counts exactly the whole
//     blocks they have in common (token ids from `fogline tokenize`), once per later segment;
//   - every bad input gets its own status, code, param and message; the API key applies;
//     a fan-out wider than the queue is refused with 429, and GET answers 405 with Allow.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer, metrics, until, require, BIN, MODEL } from './lib.mjs';

const OpenAI = require('openai').default ?? require('openai');
const KEY = 'gen-k3y';
const AUTH = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
const MAX_PROMPT = 160;
const MAX_TOKENS_LIMIT = 256;

const server = await startServer(['--api-key', KEY, '--max-seqs', '8',
  '--max-prompt-tokens', String(MAX_PROMPT), '--max-tokens-limit', String(MAX_TOKENS_LIMIT)]);
after(async () => assert.equal(await server.stop(), 0, server.log()));
const client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });

// a common start of three whole blocks or so, then questions that differ from their first word
const PREFIX = 'For the order in the note below, answer in one short sentence and copy the order number exactly. ';
const SEGMENTS = ['Where is my order 48213?', 'Can I return a blender?',
  'What are your store hours on Sunday?', 'My kettle arrived damaged, order 12345.'].map((q) => PREFIX + q);

async function generate(body, headers = AUTH) {
  const res = await fetch(`${server.url}/generate`, { method: 'POST', headers,
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body) });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = null; }
  return { status: res.status, headers: res.headers, json, text };
}

// The prompt's token ids as the server builds them: the segment as the one user message.
function promptIds(texts) {
  const model = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
  const input = texts.map((t) => JSON.stringify([{ role: 'user', content: t }])).join('\n') + '\n';
  const r = spawnSync(BIN, ['tokenize', '--model', model, '--chat', '--ids', '--add-generation-prompt',
    '--no-thinking'], { input, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim().split('\n').map((l) => JSON.parse(l));
}

const common = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };

test('outputs equal each segment alone at temperature 0, in order; the common prompt blocks are shared', async () => {
  const B = (await client.models.list()).data[0].block_size;
  // every pair of prompts has the same whole blocks in common, so whichever branch computes
  // them, each of the others takes exactly those from the prefix cache
  const ids = promptIds(SEGMENTS);
  const blocks = new Set();
  for (let i = 0; i < ids.length; i++)
    for (let j = i + 1; j < ids.length; j++) blocks.add(Math.floor(common(ids[i], ids[j]) / B));
  assert.equal(blocks.size, 1, 'test data: one common block count');
  const K = [...blocks][0];
  assert.ok(K >= 2 && ids.every((x) => Math.floor((x.length - 1) / B) > K), `test data: ${K} common blocks`);

  const m0 = await metrics(server);
  const r = await generate({ segments: SEGMENTS, max_tokens: 40, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers.get('content-type'), 'application/json');
  assert.ok(Array.isArray(r.json.output) && r.json.output.length === SEGMENTS.length, r.text);
  const m1 = await metrics(server);

  const shared = m1.get('fogline_prefix_cache_tokens_total') - m0.get('fogline_prefix_cache_tokens_total');
  assert.equal(shared, (SEGMENTS.length - 1) * K * B, 'prompt tokens shared from the prefix cache');
  const cached = r.json.fogline.segments.map((s) => s.usage.cached_tokens).sort((a, b) => a - b);
  assert.deepEqual(cached, [0, ...Array(SEGMENTS.length - 1).fill(K * B)]);
  assert.equal(r.json.fogline.usage.cached_tokens, shared);
  assert.deepEqual(r.json.fogline.segments.map((s) => s.usage.prompt_tokens), ids.map((x) => x.length));

  const alone = [];
  for (const seg of SEGMENTS) {
    const a = await client.chat.completions.create({ model: 'fogline', max_tokens: 40, temperature: 0,
      messages: [{ role: 'user', content: seg }] });
    alone.push(a);
  }
  // distinct answers, so that a reordering could not pass
  assert.equal(new Set(alone.map((a) => a.choices[0].message.content)).size, SEGMENTS.length);
  for (let i = 0; i < SEGMENTS.length; i++) {
    assert.equal(r.json.output[i], alone[i].choices[0].message.content, `segment ${i}`);
    assert.equal(r.json.fogline.segments[i].finish, alone[i].choices[0].finish_reason, `finish ${i}`);
    assert.equal(r.json.fogline.segments[i].usage.completion_tokens, alone[i].usage.completion_tokens);
  }
  await until(async () => (await metrics(server)).get('fogline_kv_pages', { state: 'used' }) === 0, 10000, 'pages back');
});

test('the guide\'s own request: segments only, with the server\'s defaults', async () => {
  const segs = ['Solve x^2+2x+1=0', 'Generate Python code for Fibonacci'];
  const r = await generate({ segments: segs });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(Object.keys(r.json).sort(), ['fogline', 'output']);
  assert.equal(r.json.output.length, 2);
  assert.ok(r.json.output.every((t) => typeof t === 'string'));
  // max_tokens bounds every segment (1 token: both stop for length)
  const one = await generate({ segments: segs, max_tokens: 1 });
  assert.equal(one.status, 200, one.text);
  assert.deepEqual(one.json.fogline.segments.map((s) => [s.finish, s.usage.completion_tokens]), [['length', 1], ['length', 1]]);
});

test('every bad input gets its own error', async () => {
  const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
  const cases = [
    ['{"segments": [', 400, 'bad_json', null, /not valid JSON/],
    [Buffer.from('{"segments":["\xff\xfe"]}', 'latin1'), 400, 'invalid_utf8', null, /UTF-8/],
    ['[1, 2]', 400, 'bad_request', null, /must be a JSON object/],
    [{}, 400, 'bad_request', 'segments', /'segments' is missing/],
    [{ segments: 'Where is my order?' }, 400, 'bad_request', 'segments', /must be an array of strings, got a string/],
    [{ segments: null }, 400, 'bad_request', 'segments', /got null/],
    [{ segments: [] }, 400, 'bad_request', 'segments', /'segments' is empty/],
    [{ segments: Array(17).fill('q') }, 400, 'out_of_range', 'segments', /at most 16 segments, got 17/],
    [{ segments: ['a', 7] }, 400, 'bad_request', 'segments', /segments\[1\] must be a string, got a number/],
    [{ segments: ['a', { text: 'b' }] }, 400, 'bad_request', 'segments', /segments\[1\] must be a string, got an object/],
    [{ segments: ['a', ''] }, 400, 'bad_request', 'segments', /segments\[1\] is empty/],
    // the JSON parser refuses \u0000 before /generate sees it
    [{ segments: ['a', 'b\u0000c'] }, 400, 'bad_json', null, /\\u0000 is not allowed/],
    [{ segments: ['a'], max_tokens: MAX_TOKENS_LIMIT + 1 }, 400, 'out_of_range', 'max_tokens', new RegExp(`\\[1, ${MAX_TOKENS_LIMIT}\\], got ${MAX_TOKENS_LIMIT + 1}`)],
    [{ segments: ['a'], max_tokens: 0 }, 400, 'out_of_range', 'max_tokens', /max_tokens/],
    [{ segments: ['a'], max_tokens: 'ten' }, 400, 'bad_request', 'max_tokens', /must be an integer/],
    [{ segments: ['a'], temperature: 5 }, 400, 'out_of_range', 'temperature', /\[0, 2\], got 5/],
    [{ segments: ['a'], decoding: { policy: 'psychic' } }, 400, 'out_of_range', 'decoding.policy', /unknown decoding.policy/],
    [{ segments: ['a'], stream: true }, 400, 'bad_request', null, /unknown field 'stream' in \/generate/],
    [{ segments: ['a'], messages: [] }, 400, 'bad_request', null, /unknown field 'messages'/],
    // the prompt limit holds per segment; the failing one is named
    [{ segments: ['hello', words, 'bye'] }, 400, 'context_length_exceeded', 'segments',
      new RegExp(`^segments\\[1\\]: the prompt has \\d+ tokens after the chat template; the limit is ${MAX_PROMPT}$`)],
  ];
  for (const [body, status, code, param, re] of cases) {
    const r = await generate(body);
    const what = typeof body === 'string' ? body : Buffer.isBuffer(body) ? 'bytes' : JSON.stringify(body).slice(0, 80);
    assert.equal(r.status, status, `${what}: ${r.text}`);
    assert.equal(r.json.error.code, code, what);
    assert.equal(r.json.error.param, param, what);
    assert.equal(r.json.error.type, 'invalid_request_error', what);
    assert.match(r.json.error.message, re, what);
  }
  // a failing segment cancels the others: nothing is left running
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_kv_pages', { state: 'used' }) === 0;
  }, 10000, 'the other segments of a refused request to end');
  // over --max-message-bytes (1 MiB): refused from its Content-Length
  const big = await generate({ segments: ['x'.repeat(1100000)] });
  assert.equal(big.status, 413);
  assert.equal(big.json.error.code, 'message_too_large');
});

test('method, API key and CORS as on /v1/*', async () => {
  for (const method of ['GET', 'PUT', 'DELETE']) {
    const r = await fetch(`${server.url}/generate`, { method, headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(r.status, 405, method);
    assert.equal(r.headers.get('allow'), 'POST', method);
    assert.equal((await r.json()).error.code, 'method_not_allowed');
  }
  const head = await fetch(`${server.url}/generate`, { method: 'HEAD', headers: { authorization: `Bearer ${KEY}` } });
  assert.equal(head.status, 405);
  assert.equal(head.headers.get('allow'), 'POST');
  for (const headers of [{ 'content-type': 'application/json' }, { ...AUTH, authorization: 'Bearer nope' }]) {
    const r = await generate({ segments: ['hi'] }, headers);
    assert.equal(r.status, 401);
    assert.equal(r.json.error.code, 'invalid_api_key');
    assert.equal(r.json.error.type, 'authentication_error');
    assert.equal(r.headers.get('www-authenticate'), 'Bearer');
  }
  // a browser's preflight
  const pre = await fetch(`${server.url}/generate`, { method: 'OPTIONS', headers: { origin: 'http://a.example' } });
  assert.equal(pre.status, 204);
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
});

test('a fan-out wider than the server takes is refused with 429; one that fits runs', async () => {
  // 1 running + 1 waiting: three segments can never all be admitted, two can
  const small = await startServer(['--max-seqs', '1', '--max-queued', '1']);
  try {
    const post = (segments) => fetch(`${small.url}/generate`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ segments, max_tokens: 16 }) });
    let r = await post(['Where is my order 48213?', 'Can I return a blender?', 'What are your store hours?']);
    assert.equal(r.status, 429);
    const e = (await r.json()).error;
    assert.equal(e.code, 'busy');
    assert.equal(e.type, 'rate_limit_error');
    assert.match(e.message, /this one has 3 branches; retry later/);
    r = await post(['Where is my order 48213?', 'Can I return a blender?']);
    assert.equal(r.status, 200);
    assert.equal((await r.json()).output.length, 2);
    const m = await metrics(small);
    assert.equal(m.get('fogline_errors_total', { code: 'busy' }), 1);
    // one branch at a time here (--max-seqs 1): a first segment over the prompt limit ends the
    // request before the second reaches the engine
    const words = Array.from({ length: 600 }, (_, i) => `w${i}`).join(' ');
    r = await post([words, 'Where is my order 48213?']);
    assert.equal(r.status, 400);
    const e2 = (await r.json()).error;
    assert.equal(e2.code, 'context_length_exceeded');
    assert.match(e2.message, /^segments\[0\]: /);
    const m2 = await metrics(small);
    assert.equal(m2.get('fogline_requests_total', { outcome: 'cancelled' }) - m.get('fogline_requests_total', { outcome: 'cancelled' }), 1);
    assert.equal(m2.get('fogline_forwards_total'), m.get('fogline_forwards_total'), 'no forward for the refused request');
  } finally {
    assert.equal(await small.stop(), 0, small.log());
  }
});

test('a client that goes away ends every segment; pages come back', async () => {
  const ac = new AbortController();
  const req = fetch(`${server.url}/generate`, { method: 'POST', headers: AUTH, signal: ac.signal,
    body: JSON.stringify({ segments: SEGMENTS, max_tokens: MAX_TOKENS_LIMIT,
      decoding: { policy: 'sequential', pipeline: false } }) });
  const n0 = server.lines.length; // earlier tests logged /generate requests too
  await until(() => server.lines.slice(n0).some((l) => /event=chat_http req="gen-/.test(l)), 10000, 'the request');
  ac.abort();
  await assert.rejects(req);
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_kv_pages', { state: 'used' }) === 0;
  }, 20000, 'the branches of a gone client to end');
});
