// HTTP on the WebSocket port: /health, /ready, static files from the web root (types, no
// path traversal), CORS and allowed origins, the API key on WebSocket upgrades and first
// messages, and /metrics read with a real Prometheus text parser, checked for values that
// moved.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { startServer, connect, wsClient, user, metrics } from './lib.mjs';

let server;
let webRoot;

before(async () => {
  webRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'fogline-web-'));
  fs.writeFileSync(path.join(webRoot, 'index.html'), '<!doctype html><p>hi</p>');
  fs.mkdirSync(path.join(webRoot, 'js'));
  fs.writeFileSync(path.join(webRoot, 'js', 'app.js'), 'console.log(1)');
  fs.writeFileSync(path.join(webRoot, 'style.css'), 'p{}');
  fs.writeFileSync(path.join(path.dirname(webRoot), `${path.basename(webRoot)}-secret.txt`), 'secret');
  server = await startServer(['--web-root', webRoot, '--api-key', 'k3y',
    '--allowed-origins', 'http://good.example, http://also.example']);
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
  fs.rmSync(webRoot, { recursive: true, force: true });
  fs.rmSync(`${webRoot}-secret.txt`, { force: true });
});

test('/health and /ready', async () => {
  let r = await fetch(`${server.url}/health`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { status: 'ok' });
  r = await fetch(`${server.url}/ready`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { status: 'ready' });
});

test('static files with their types', async () => {
  let r = await fetch(`${server.url}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/html/);
  assert.equal(await r.text(), '<!doctype html><p>hi</p>');
  r = await fetch(`${server.url}/js/app.js`);
  assert.match(r.headers.get('content-type'), /^text\/javascript/);
  assert.equal(await r.text(), 'console.log(1)');
  r = await fetch(`${server.url}/style.css`);
  assert.match(r.headers.get('content-type'), /^text\/css/);
  await r.arrayBuffer();
  r = await fetch(`${server.url}/missing.html`);
  assert.equal(r.status, 404);
  await r.arrayBuffer();
  r = await fetch(`${server.url}/health`, { method: 'DELETE' });
  assert.equal(r.status, 405);
  await r.arrayBuffer();
});

// fetch normalises "..", so traversal is sent on a raw socket
function rawGet(p) {
  return new Promise((resolve, reject) => {
    const s = net.connect(server.port, '127.0.0.1', () => {
      s.write(`GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    });
    let data = '';
    s.on('data', (d) => (data += d.toString('latin1')));
    s.on('end', () => resolve(data));
    s.on('error', reject);
  });
}

test('no path traversal out of the web root', async () => {
  const secret = `${path.basename(webRoot)}-secret.txt`;
  for (const p of [`/../${secret}`, `/js/../../${secret}`, `/%2e%2e/${secret}`, `/..%2f${secret}`,
                   '/../../../../etc/passwd', '/%2e%2e/%2e%2e/%2e%2e/etc/passwd']) {
    const res = await rawGet(p);
    assert.doesNotMatch(res, /secret|root:/, `${p} leaked: ${res.slice(0, 200)}`);
    assert.match(res, /^HTTP\/1\.1 (400|403|404)/, p);
  }
});

test('origins: an allowed origin gets CORS headers, another is refused', async () => {
  let r = await fetch(`${server.url}/health`, { headers: { origin: 'http://good.example' } });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://good.example');
  await r.arrayBuffer();
  r = await fetch(`${server.url}/health`, { headers: { origin: 'http://evil.example' } });
  assert.equal(r.status, 403);
  await r.arrayBuffer();
  r = await fetch(`${server.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'http://also.example' } });
  assert.equal(r.status, 204);
  assert.match(r.headers.get('access-control-allow-headers'), /authorization/);
  const c = wsClient(server.wsUrl, { origin: 'http://evil.example' });
  await assert.rejects(c.opened, (e) => e.status === 403);
});

test('API key: HTTP bearer, WebSocket header or first message', async () => {
  let r = await fetch(`${server.url}/v1/models`);
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.code, 'invalid_api_key');
  r = await fetch(`${server.url}/v1/models`, { headers: { authorization: 'Bearer k3y' } });
  assert.equal(r.status, 200);
  // the request defaults and where each comes from: the built-in model's config.json states
  // its pipelining; what it does not state is the family's
  const model = (await r.json()).data[0];
  assert.equal(model.decoding.pipeline, true);
  assert.equal(model.decoding.tau_add, 0.5);
  assert.equal(model.decoding_source.pipeline, 'model');
  assert.equal(model.decoding_source.tau_add, 'model');
  assert.equal(model.decoding_source.k, 'family');
  assert.equal(model.decoding_source.temperature, 'family');

  const wrong = wsClient(server.wsUrl, { headers: { authorization: 'Bearer nope' } });
  await assert.rejects(wrong.opened, (e) => e.status === 401);

  const byHeader = await connect(server, { headers: { authorization: 'Bearer k3y' } });
  assert.equal(byHeader.hello.auth_required, false);
  byHeader.send({ type: 'ping', id: 'h' });
  await byHeader.next((f) => f.type === 'pong');
  byHeader.close();

  const byMessage = await connect(server);
  assert.equal(byMessage.hello.auth_required, true);
  byMessage.send({ type: 'auth', key: 'k3y' });
  assert.deepEqual(await byMessage.next(), { type: 'auth', ok: true });
  byMessage.send({ type: 'chat', id: 'a1', messages: user('hi'), max_tokens: 8 });
  assert.equal((await byMessage.collect('a1')).at(-1).type, 'done');
  byMessage.close();

  const noKey = await connect(server);
  noKey.send({ type: 'chat', id: 'x', messages: user('hi') });
  const e = await noKey.next((f) => f.type === 'error');
  assert.equal(e.code, 'unauthorized');
  assert.equal((await noKey.closed).code, 1008);

  const badKey = await connect(server);
  badKey.send({ type: 'auth', key: 'guess' });
  assert.equal((await badKey.next((f) => f.type === 'error')).code, 'unauthorized');
  assert.equal((await badKey.closed).code, 1008);
});

test('/metrics parses as Prometheus text and its values move', async () => {
  const m0 = await metrics(server);
  const names = m0.families.map((f) => f.name);
  for (const n of ['fogline_ws_connections', 'fogline_requests_total', 'fogline_tokens_total',
                   'fogline_forwards_total', 'fogline_tokens_per_forward', 'fogline_step_seconds',
                   'fogline_queue_depth', 'fogline_kv_pages', 'fogline_persist_wait_seconds_total',
                   'fogline_errors_total', 'fogline_first_update_seconds'])
    assert.ok(names.includes(n), `${n} is exported`);
  const c = await connect(server, { headers: { authorization: 'Bearer k3y' } });
  assert.equal((await metrics(server)).get('fogline_ws_connections'), m0.get('fogline_ws_connections') + 1);
  c.send({ type: 'chat', id: 'm1', messages: user('where is my order'), max_tokens: 24 });
  const fr = await c.collect('m1');
  const done = fr.at(-1);
  c.send('not json');
  await c.next((f) => f.type === 'error');
  const m1 = await metrics(server);
  const outcome = done.finish;
  assert.equal(m1.get('fogline_requests_total', { outcome }), m0.get('fogline_requests_total', { outcome }) + 1);
  assert.equal(m1.get('fogline_tokens_total', { kind: 'reply' }) - m0.get('fogline_tokens_total', { kind: 'reply' }),
               done.usage.completion_tokens);
  assert.equal(m1.get('fogline_tokens_total', { kind: 'prompt' }) - m0.get('fogline_tokens_total', { kind: 'prompt' }),
               done.usage.prompt_tokens);
  assert.ok(m1.get('fogline_forwards_total') >= m0.get('fogline_forwards_total') + done.stats.forwards);
  assert.equal(m1.get('fogline_tokens_per_forward').count, m0.get('fogline_tokens_per_forward').count + 1);
  assert.ok(m1.get('fogline_step_seconds').count > m0.get('fogline_step_seconds').count);
  assert.ok(m1.get('fogline_step_seconds').sum > 0);
  assert.equal(m1.get('fogline_first_update_seconds').count, m0.get('fogline_first_update_seconds').count + 1);
  assert.equal((m1.get('fogline_errors_total', { code: 'bad_json' }) ?? 0), (m0.get('fogline_errors_total', { code: 'bad_json' }) ?? 0) + 1);
  // the last stored pages may still be held by the persistence thread until the engine's next step
  assert.ok(m1.get('fogline_kv_pages', { state: 'used' }) <= 4);
  assert.equal(m1.get('fogline_requests_active'), 0);
  assert.equal(m1.get('fogline_sequences_running'), 0);
  assert.ok(m1.get('fogline_kv_pages', { state: 'free' }) > 0);
  c.close();
});

test('decoding defaults: a flag overrides the model, and says so', async () => {
  const s2 = await startServer(['--no-pipeline', '--threshold', '0.8', '--weights', 'f32',
    '--kv-format', 'bf16'],
    { env: { FOGLINE_TAU_ADD: '0.3', FOGLINE_WEIGHTS: 'bf16', FOGLINE_KV_FORMAT: 'f32' } });
  try {
    const model = (await (await fetch(`${s2.url}/v1/models`)).json()).data[0];
    // the weights and KV flags win over FOGLINE_WEIGHTS and FOGLINE_KV_FORMAT, and the log
    // says what was chosen (f32 weights: the CPU, wherever a GPU is), the CPU's kernel
    // levels too
    assert.equal(model.weights, 'f32');
    assert.equal(model.kv_format, 'bf16');
    await s2.waitLog(/event=backend .*weights=f32 kv=bf16 .*; weights f32.*; kv bf16; kernels (AVX-512|AVX2\+FMA|plain C), q8\/q4 (AMX-INT8|AVX-512 VNNI|AVX2|plain C)"/);
    assert.equal(model.decoding.pipeline, false);
    assert.equal(model.decoding.threshold, 0.8);
    assert.equal(model.decoding.tau_add, 0.3);
    assert.deepEqual([model.decoding_source.pipeline, model.decoding_source.threshold,
      model.decoding_source.tau_add, model.decoding_source.tau_act], ['flag', 'flag', 'flag', 'model']);
  } finally {
    assert.equal(await s2.stop(), 0, s2.log());
  }
});
