// The official `openai` npm client, unchanged, against /v1/models[/ID] and /v1/chat/completions,
// streaming (SSE) and not, plus OpenAI-shaped errors with the right HTTP status.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, require, user, until } from './lib.mjs';

const OpenAI = require('openai').default;

let server;
let client;

before(async () => {
  server = await startServer(['--api-key', 'sk-test-123', '--max-prompt-tokens', '160',
    '--max-tokens-limit', '256'], { hold: true });
  await server.release(); // the disconnect test holds it
  client = new OpenAI({ apiKey: 'sk-test-123', baseURL: `${server.url}/v1`, maxRetries: 0 });
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

test('models.list names the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].object, 'model');
  assert.equal(typeof models[0].id, 'string');
});

test('models.retrieve gives the served model by its id or "fogline", 404 for another', async () => {
  const [listed] = (await client.models.list()).data;
  const m = await client.models.retrieve(listed.id);
  assert.deepEqual(m, listed);
  assert.deepEqual(await client.models.retrieve('fogline'), listed);
  await assert.rejects(client.models.retrieve('gpt-4o'),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model' &&
      /'gpt-4o' does not exist/.test(e.message));
});

test('a non-streaming completion', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  const r = await client.chat.completions.create({
    model: models[0].id,
    messages: [{ role: 'system', content: 'You are a help desk.' }, ...user('my password expired')],
    max_tokens: 32,
    temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, models[0].id);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.usage.completion_tokens_details, undefined, 'no reasoning count without think blocks');
});

test('a streaming completion: role first, content deltas, a finish reason, usage, [DONE]', async () => {
  const stream = await client.chat.completions.create({
    model: 'fogline',
    messages: user('my printer is offline'),
    max_tokens: 40,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3, `got ${chunks.length} chunks`);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.ok(text.length > 0);
  const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.ok(['stop', 'length'].includes(fin[0].choices[0].finish_reason));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage.completion_tokens > 0);
  assert.ok(chunks.every((c) => c.id === chunks[0].id));
});

test('the same greedy request gives the same text streamed and not', async () => {
  const req = { model: 'fogline', messages: user('how do I reset my router'), max_tokens: 24, temperature: 0 };
  const a = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? '';
  assert.equal(text, a.choices[0].message.content);
});

test('errors come in the OpenAI shape with the right status', async () => {
  const bad = new OpenAI({ apiKey: 'wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(bad.chat.completions.create({ model: 'fogline', messages: user('hi') }),
    (e) => e.status === 401 && e.code === 'invalid_api_key');
  await assert.rejects(client.chat.completions.create({ model: 'gpt-17', messages: user('hi') }),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.param === 'model');
  // names quoted in messages are cut to a length, never in the middle of a character
  await assert.rejects(client.chat.completions.create({ model: 'x' + 'é'.repeat(80), messages: user('hi') }),
    (e) => e.status === 404 && /does not exist/.test(e.message) && !e.message.includes('\ufffd'));
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: [{ role: 'x' + 'ü'.repeat(40), content: 'hi' }] }),
    (e) => e.status === 400 && /role/.test(e.message) && !e.message.includes('\ufffd'));
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: [] }),
    (e) => e.status === 400 && e.code === 'bad_request' && /messages/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 9999 }),
    (e) => e.status === 400 && e.code === 'out_of_range' && e.param === 'max_tokens');
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'), temperature: 5 }),
    (e) => e.status === 400 && e.param === 'temperature');
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'), n: 17 }),
    (e) => e.status === 400 && e.code === 'out_of_range' && e.param === 'n');
  // a response_format this server cannot guarantee is refused, never ignored (tests/structured
  // has the ones it can)
  const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'),
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', items: { type: 'string' }, minContains: 1 }, strict: true } } }),
    (e) => e.status === 400 && e.param === 'response_format' && /unsupported keyword 'minContains'/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'), response_format: { type: 'xml' } }),
    (e) => e.status === 400 && e.param === 'response_format');
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user('hi'),
    tools: [{ type: 'function', function: { name: 'refund', parameters: schema } }] }),
    (e) => e.status === 400 && e.param === 'tools' && /no tool syntax/.test(e.message));
  const plain = await client.chat.completions.create({ model: 'fogline', messages: user('hi'), max_tokens: 8,
    response_format: { type: 'text' }, tools: [] });
  assert.ok(plain.choices[0].message.content !== undefined, 'text and no tools are fine');
  const words = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
  await assert.rejects(client.chat.completions.create({ model: 'fogline', messages: user(words), stream: true }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded');
});

test('raw HTTP: bad JSON, wrong method, unknown endpoint', async () => {
  const h = { authorization: 'Bearer sk-test-123', 'content-type': 'application/json' };
  let r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: h, body: '{"messages": [' });
  assert.equal(r.status, 400);
  let j = await r.json();
  assert.equal(j.error.code, 'bad_json');
  assert.equal(j.error.type, 'invalid_request_error');
  r = await fetch(`${server.url}/v1/chat/completions`, { headers: h });
  assert.equal(r.status, 405);
  await r.arrayBuffer();
  // forgetting a session takes the key too (this server keeps none: 404 with it)
  r = await fetch(`${server.url}/sessions/s-1`, { method: 'DELETE' });
  assert.equal(r.status, 401);
  await r.arrayBuffer();
  r = await fetch(`${server.url}/sessions/s-1`, { method: 'DELETE', headers: h });
  assert.equal(r.status, 404);
  await r.arrayBuffer();
  for (const method of ['GET', 'POST']) { // no such path, whatever the method
    r = await fetch(`${server.url}/v1/embeddings`, { method, headers: h, ...(method === 'POST' ? { body: '{}' } : {}) });
    assert.equal(r.status, 404, method);
    j = await r.json();
    assert.equal(j.error.code, 'not_found');
    assert.match(j.error.message, /^unknown endpoint \/v1\/embeddings: this server serves .*\/v1\/responses/);
  }
  r = await fetch(`${server.url}/v1/models`, { method: 'POST', headers: h, body: '{}' });
  assert.equal(r.status, 405);
  assert.equal((await r.json()).error.code, 'method_not_allowed');
  r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: h, body: Buffer.from('{"model":"fogline","messages":[{"role":"user","content":"\xff\xfe"}]}', 'latin1'),
  });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, 'invalid_utf8');
  // over --max-message-bytes (1 MiB by default): refused from its Content-Length
  const big = JSON.stringify({ model: 'fogline', messages: user('x'.repeat(1100000)) });
  r = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: h, body: big });
  assert.equal(r.status, 413);
  assert.equal((await r.json()).error.code, 'message_too_large');
});

const TEN_QUESTIONS = 'Where is my order 48213? What are your store hours on Sunday? Can I return the blender? ' +
  'My kettle arrived damaged, order 12345. Cancel order 55555. Is the desk lamp in stock? Does the toaster ' +
  'have a warranty? How long does express shipping take? I forgot my password, my email is ann@example.com. ' +
  'I want to talk to a human.';

test('a client that disconnects mid-stream cancels its request', async () => {
  // The engine is held and stepped 25 forwards (the prompt, then three blocks of eight
  // one-token steps), so the stream has content and the reply cannot end before the server
  // sees the disconnect, however the client and the engine are scheduled.
  await server.hold();
  const submitted = () => server.lines.filter((l) => /event=submitted /.test(l)).length;
  const before = submitted();
  const ctl = new AbortController();
  // (not awaited yet: the response head waits for the engine's first event)
  const streaming = client.chat.completions.create({
    // ten questions at once: far more than the model was trained to answer in one reply, so it
    // runs to max_tokens (a short reply could end before the server sees the disconnect)
    model: 'fogline', messages: user(TEN_QUESTIONS), max_tokens: 256, stream: true,
    decoding: { policy: 'sequential', pipeline: false },
  }, { signal: ctl.signal });
  await until(() => submitted() > before, 10000, 'the request in the engine');
  for (let i = 0; i < 25; i++) await server.step();
  const stream = await streaming;
  // (the frames of those forwards are buffered here already: stop reading at the abort)
  let n = 0;
  try {
    for await (const ch of stream) {
      if (ch.choices[0]?.delta?.content && ++n === 2) {
        ctl.abort();
        break;
      }
      assert.equal(ch.choices[0]?.finish_reason ?? null, null, 'the reply did not end before the abort');
    }
  } catch (e) {
    assert.ok(ctl.signal.aborted, `only the abort ends the stream early: ${e}`);
  }
  assert.equal(n, 2, 'two content chunks came before the abort');
  await server.waitLog(/event=done .*finish=cancelled.*orphaned=1/, 10000);
  await server.release();
});
