// POST /v1/completions (docs/protocol.md) with the official `openai` npm client: a prompt given
// as the chat template's rendered text, or as its token ids (from `fogline tokenize`), decodes
// to exactly the reply /v1/chat/completions gives for those messages; streamed chunks add up to
// the plain answer; stop strings; and every bad input as an OpenAI-shaped error with its status.
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

test('every bad input is an OpenAI-shaped error with its status and param', async () => {
  const cases = [
    [{}, 400, 'bad_request', 'prompt', /'prompt' is required/],
    [{ prompt: '' }, 400, 'bad_request', 'prompt', /must not be empty/],
    [{ prompt: [] }, 400, 'bad_request', 'prompt', /must not be empty/],
    [{ prompt: [[]] }, 400, 'bad_request', 'prompt', /'prompt\[0\]' must not be empty/],
    [{ prompt: ['a', 'b'] }, 400, 'out_of_range', 'prompt', /holds 2 prompts/],
    [{ prompt: [[1], [2]] }, 400, 'out_of_range', 'prompt', /holds 2 prompts/],
    [{ prompt: [5, 'x'] }, 400, 'bad_request', 'prompt', /prompt\[1\] must be a token id/],
    [{ prompt: [-1] }, 400, 'bad_request', 'prompt', /prompt\[0\] must be a token id/],
    [{ prompt: [1.5] }, 400, 'bad_request', 'prompt', /prompt\[0\] must be a token id/],
    [{ prompt: [2147483648] }, 400, 'bad_request', 'prompt', /must be a token id/],
    [{ prompt: [7, 99999999] }, 400, 'bad_request', 'prompt', /token id 99999999 at 1 is outside the vocabulary/],
    [{ prompt: 42 }, 400, 'bad_request', 'prompt', /must be a string, an array of token ids/],
    [{ prompt: { text: 'x' } }, 400, 'bad_request', 'prompt', /must be a string/],
    [{ prompt: 'a\u0000b' }, 400, 'bad_json', null, /NUL/], // jansson refuses it first
    [{ prompt: 'x'.repeat(400) }, 400, 'context_length_exceeded', 'prompt', /tokens; the limit is 96/],
    [{ prompt: 'hi', n: 2 }, 400, 'out_of_range', 'n', /'n' must be in \[1, 1\]/],
    [{ prompt: 'hi', best_of: 3 }, 400, 'out_of_range', 'best_of', /'best_of' must be in \[1, 1\]/],
    [{ prompt: 'hi', echo: true }, 400, 'bad_request', 'echo', /'echo' is not supported/],
    [{ prompt: 'hi', echo: 'yes' }, 400, 'bad_request', 'echo', /true or false/],
    [{ prompt: 'hi', logprobs: 1 }, 400, 'bad_request', 'logprobs', /not supported/],
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
