// The WebSocket protocol (docs/protocol.md) against a real `fogline serve`: chats stream
// drafts, commits and done; several requests share a connection; cancel and disconnects free
// the engine's pages; every bad input gets its documented error and the server keeps
// serving the others.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawnSync } from 'node:child_process';
import { startServer, connect, wsClient, user, FOUR_QUESTIONS, metrics, until, stepUntil, BIN, MODEL } from './lib.mjs';

let server;

before(async () => {
  server = await startServer(['--max-message-bytes', '4096', '--max-prompt-tokens', '96',
    '--max-conn-requests', '3', '--max-tokens-limit', '512'], { hold: true });
  await server.release(); // the tests that must not race the engine hold it themselves
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, `the server exits 0 on SIGTERM\n${server.log()}`);
});

// After a bad input the connection (when kept) and the server still answer.
async function stillServes(c) {
  c.send({ type: 'ping', id: 'after' });
  const pong = await c.next((f) => f.type === 'pong' && f.id === 'after');
  assert.equal(pong.id, 'after');
}

test('hello describes the server on connect', async () => {
  const c = await connect(server);
  assert.equal(c.hello.type, 'hello');
  assert.match(c.hello.server, /^fogline /);
  assert.equal(typeof c.hello.model, 'string');
  assert.equal(c.hello.block_size, 8);
  assert.equal(c.hello.auth_required, false);
  assert.equal(c.hello.limits.max_message_bytes, 4096);
  assert.equal(c.hello.limits.max_requests, 3);
  // the decoding defaults a chat gets, exactly as /v1/models states them: the built-in model's
  // config.json sets pipelining (tau_add 0.5); what it leaves out is the family's
  assert.equal(c.hello.decoding.pipeline, true);
  assert.equal(c.hello.decoding.tau_add, 0.5);
  assert.equal(c.hello.decoding_source.pipeline, 'model');
  assert.equal(c.hello.decoding_source.temperature, 'family');
  const model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0];
  // auto: what `fogline info` says auto picks for the directory (bf16 for the built-in model,
  // whose matrices are all bf16 on disk)
  const auto = MODEL ? JSON.parse(spawnSync(BIN, ['info', '--model', MODEL, '--json']).stdout).weights_auto
    : 'bf16';
  assert.equal(model.weights, auto);
  assert.equal(c.hello.weights, auto);
  // the KV pages' format: auto is f32 on the CPU, bf16 on CUDA
  assert.ok(['f32', 'bf16'].includes(model.kv_format), model.kv_format);
  assert.equal(c.hello.kv_format, model.kv_format);
  assert.deepEqual(c.hello.decoding, model.decoding);
  assert.deepEqual(c.hello.decoding_source, model.decoding_source);
  c.close();
});

test('hello carries the decoding defaults the server\'s flags set', async () => {
  const s2 = await startServer(['--no-pipeline', '--threshold', '0.8']);
  try {
    const c = await connect(s2);
    assert.equal(c.hello.decoding.pipeline, false);
    assert.equal(c.hello.decoding.threshold, 0.8);
    assert.equal(c.hello.decoding.policy, 'threshold');
    assert.deepEqual([c.hello.decoding_source.pipeline, c.hello.decoding_source.threshold,
      c.hello.decoding_source.policy], ['flag', 'flag', 'model']);
    c.close();
  } finally {
    assert.equal(await s2.stop(), 0, s2.log());
  }
});

test('a chat streams drafts, commits in block order, then done with usage and stats', async () => {
  const c = await connect(server);
  // sequential unmasking: eight steps per block, so drafts come before each commit. With the
  // threshold policy a confident model fills a block in one or two steps, and a draft still
  // queued when its block commits is dropped by design (the commit supersedes it). So that no
  // draft is dropped because the loop ran late, the engine runs one forward at a time and each
  // forward's frames are in before the next.
  await server.hold();
  c.send({ type: 'chat', id: 'r1', session: 's-42', messages: user('my printer says offline'),
           max_tokens: 40, temperature: 0, decoding: { policy: 'sequential', pipeline: true } });
  await server.waitLog(/event=submitted req="r1"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'r1' && (f.type === 'done' || f.type === 'error')));
  await server.release();
  const frames = await c.collect('r1');
  const drafts = frames.filter((f) => f.type === 'draft');
  const commits = frames.filter((f) => f.type === 'commit');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.ok(drafts.length > 0, 'drafts were sent');
  for (const d of drafts) {
    assert.ok(Number.isInteger(d.block) && d.block >= 0);
    assert.ok(Number.isInteger(d.step) && d.step >= 1);
    assert.ok(Array.isArray(d.tokens) && d.tokens.length > 0 && d.tokens.length <= 8);
    for (const t of d.tokens) assert.ok(t.mask === true || typeof t.t === 'string', JSON.stringify(t));
    for (const i of d.new) assert.ok(i >= 0 && i < d.tokens.length && !d.tokens[i].mask);
  }
  // drafts of a block come before its commit
  for (const cm of commits) {
    const last = frames.findLastIndex((f) => f.type === 'draft' && f.block === cm.block);
    assert.ok(last < frames.indexOf(cm), `block ${cm.block}'s drafts precede its commit`);
  }
  assert.deepEqual(commits.map((x) => x.block), commits.map((_, i) => i), 'commits in block order');
  assert.ok(['stop', 'length'].includes(done.finish));
  assert.equal(done.session, 's-42', 'the session is echoed');
  assert.ok(done.usage.prompt_tokens > 0);
  assert.ok(done.usage.completion_tokens > 0 && done.usage.completion_tokens <= 40);
  assert.equal(done.usage.total_tokens, done.usage.prompt_tokens + done.usage.completion_tokens);
  assert.ok(done.stats.tpf > 0 && done.stats.forwards > 0);
  assert.ok(done.stats.ms_total > 0 && done.stats.ms_first_update > 0);
  assert.ok(commits.map((x) => x.text).join('').length > 0, 'some text was committed');
  c.close();
});

test('several requests run on one connection, each ends with its own done', async () => {
  const c = await connect(server);
  const ids = ['a', 'b', 'c'];
  for (const id of ids) c.send({ type: 'chat', id, messages: user(`question ${id}: reset my password`), max_tokens: 16 });
  const results = await Promise.all(ids.map((id) => c.collect(id)));
  for (const fr of results) {
    assert.equal(fr.at(-1).type, 'done');
    assert.ok(fr.every((f) => f.id === fr[0].id));
  }
  c.close();
});

test('cancel ends a request with done(cancelled) and frees its KV pages', async () => {
  const c = await connect(server);
  // held: the reply cannot end before the cancel comes, however short it is
  await server.hold();
  c.send({ type: 'chat', id: 'long', messages: user('tell me everything about refunds'), max_tokens: 512,
           decoding: { policy: 'sequential', pipeline: false } });
  await server.waitLog(/event=submitted req="long"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'long' && f.type === 'draft'));
  assert.ok((await metrics(server)).get('fogline_kv_pages', { state: 'used' }) > 0, 'it holds pages');
  c.send({ type: 'cancel', id: 'long' });
  const done = await c.next((f) => f.id === 'long' && f.type === 'done');
  assert.equal(done.finish, 'cancelled');
  await server.release();
  // a cancelled sequence frees its pages at once (the persistence thread may hold the last
  // stored few until the engine's next step)
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_kv_pages', { state: 'used' }) <= 4 && m.get('fogline_sequences_running') === 0;
  }, 5000, 'KV pages freed after cancel');
  c.send({ type: 'cancel', id: 'long' });
  const err = await c.next((f) => f.type === 'error');
  assert.equal(err.code, 'unknown_id');
  assert.equal(err.id, 'long');
  c.close();
});

test('ping gets pong with the same id', async () => {
  const c = await connect(server);
  c.send({ type: 'ping', id: 'p1' });
  assert.deepEqual(await c.next((f) => f.type === 'pong'), { type: 'pong', id: 'p1' });
  c.close();
});

test('malformed JSON, non-objects and unknown types get errors; the connection stays', async () => {
  const c = await connect(server);
  c.send('{"type": "chat", ');
  let e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'bad_json');
  assert.match(e.message, /JSON/);
  c.send('[1,2,3]');
  e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'bad_json');
  c.send({ type: 'launch', id: 'x1' });
  e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'unknown_type');
  assert.equal(e.id, 'x1');
  c.send({ id: 'x2' });
  e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'bad_request');
  await stillServes(c);
  c.close();
});

test('wrong types and out-of-range options name the field', async () => {
  const c = await connect(server);
  const cases = [
    [{ messages: 'hi' }, 'bad_request', /messages/],
    [{ messages: [] }, 'bad_request', /empty/],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, 'bad_request', /role/],
    [{ messages: [{ role: 'user', content: 7 }] }, 'bad_request', /content/],
    [{ max_tokens: 'ten' }, 'bad_request', /max_tokens/],
    [{ max_tokens: 0 }, 'out_of_range', /max_tokens/],
    [{ max_tokens: 100000 }, 'out_of_range', /max_tokens/],
    [{ max_tokens: 1.5 }, 'bad_request', /max_tokens/],
    [{ temperature: -1 }, 'out_of_range', /temperature/],
    [{ top_p: 0 }, 'out_of_range', /top_p/],
    [{ top_k: -3 }, 'out_of_range', /top_k/],
    [{ seed: 'x' }, 'bad_request', /seed/],
    [{ stop: 5 }, 'bad_request', /stop/],
    [{ stop: ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'] }, 'out_of_range', /stop/],
    [{ decoding: [] }, 'bad_request', /decoding/],
    [{ decoding: { policy: 'magic' } }, 'out_of_range', /policy/],
    [{ decoding: { threshold: 2 } }, 'out_of_range', /threshold/],
    [{ decoding: { k: 0 } }, 'out_of_range', /decoding\.k/],
    [{ decoding: { max_blocks: 99 } }, 'out_of_range', /max_blocks/],
    [{ decoding: { pipeline: 'yes' } }, 'bad_request', /pipeline/],
    [{ decoding: { fast: true } }, 'bad_request', /unknown decoding option/],
    [{ colour: 'blue' }, 'bad_request', /unknown field/],
  ];
  let n = 0;
  for (const [patch, code, re] of cases) {
    const id = `bad${n++}`;
    c.send({ type: 'chat', id, messages: user('hi'), max_tokens: 8, ...patch });
    const e = await c.next((f) => f.id === id);
    assert.equal(e.type, 'error', `${JSON.stringify(patch)} -> ${JSON.stringify(e)}`);
    assert.equal(e.code, code, `${JSON.stringify(patch)} -> ${e.message}`);
    assert.match(e.message, re);
  }
  c.send({ type: 'chat', id: 7, messages: user('hi') });
  const e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'bad_request');
  assert.match(e.message, /'id'/);
  await stillServes(c);
  c.close();
});

test('a message fragmented over several frames is put back together', async () => {
  const c = await connect(server);
  const text = JSON.stringify({ type: 'chat', id: 'frag', messages: user('hello there'), max_tokens: 8 });
  const third = Math.floor(text.length / 3);
  c.ws.send(text.slice(0, third), { fin: false });
  c.ws.send(text.slice(third, 2 * third), { fin: false });
  c.ws.send(text.slice(2 * third), { fin: true });
  assert.equal((await c.collect('frag')).at(-1).type, 'done');
  c.close();
});

test('a binary frame is refused and the connection stays', async () => {
  const c = await connect(server);
  c.ws.send(Buffer.from([1, 2, 3, 4]), { binary: true });
  const e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'binary_not_supported');
  await stillServes(c);
  c.close();
});

test('invalid UTF-8 gets an error and close 1007', async () => {
  const c = await connect(server);
  c.ws.send(Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]), { binary: false });
  const e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'invalid_utf8');
  const { code } = await c.closed;
  assert.equal(code, 1007);
});

test('an oversized message gets an error and close 1009', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'big', messages: user('x'.repeat(5000)) });
  const e = await c.next((f) => f.type === 'error');
  assert.equal(e.code, 'message_too_large');
  const { code } = await c.closed;
  assert.equal(code, 1009);
});

test('a prompt over --max-prompt-tokens is refused with prompt_too_long', async () => {
  const c = await connect(server);
  const words = Array.from({ length: 150 }, (_, i) => `word${i}`).join(' ');
  c.send({ type: 'chat', id: 'long-prompt', messages: user(words), max_tokens: 8 });
  const e = await c.next((f) => f.id === 'long-prompt');
  assert.equal(e.type, 'error');
  assert.equal(e.code, 'prompt_too_long');
  assert.match(e.message, /limit is 96/);
  await stillServes(c);
  c.close();
});

test('too many concurrent requests on a connection, and duplicate ids, are refused', async () => {
  const c = await connect(server);
  // held: q1..q3 are all still running when the duplicate and the fourth come
  await server.hold();
  const slow = { max_tokens: 256, decoding: { policy: 'sequential', pipeline: false } };
  for (const id of ['q1', 'q2', 'q3']) c.send({ type: 'chat', id, messages: user('hello'), ...slow });
  c.send({ type: 'chat', id: 'q1', messages: user('hello') });
  c.send({ type: 'chat', id: 'q4', messages: user('hello') });
  const dup = await c.next((f) => f.type === 'error' && f.id === 'q1');
  assert.equal(dup.code, 'duplicate_id');
  const many = await c.next((f) => f.type === 'error' && f.id === 'q4');
  assert.equal(many.code, 'too_many_requests');
  for (const id of ['q1', 'q2', 'q3']) c.send({ type: 'cancel', id });
  for (const id of ['q1', 'q2', 'q3']) {
    const d = await c.next((f) => f.id === id && f.type === 'done');
    assert.equal(d.finish, 'cancelled');
  }
  await server.release();
  c.close();
});

test('an abrupt disconnect cancels its requests and frees their pages; others go on', async () => {
  const before = await metrics(server);
  const cancelled0 = before.get('fogline_requests_total', { outcome: 'cancelled' });
  const c = await connect(server);
  const other = await connect(server);
  // the reply must outlast the disconnect: the engine is held from its first draft until the
  // server has cancelled it (a free-running reply raced the close, and a short one won)
  await server.hold();
  c.send({ type: 'chat', id: 'gone', max_tokens: 512, messages: user(FOUR_QUESTIONS),
           decoding: { policy: 'sequential', pipeline: false, max_blocks: 1 } });
  await server.waitLog(/event=submitted req="gone"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'gone' && f.type === 'draft'));
  c.ws.terminate(); // TCP close, no close frame
  await until(async () => (await metrics(server)).get('fogline_requests_total', { outcome: 'cancelled' }) > cancelled0,
              10000, 'the dropped request to be cancelled');
  await server.release();
  other.send({ type: 'chat', id: 'alive', messages: user('hi'), max_tokens: 16 });
  const fr = await other.collect('alive');
  assert.equal(fr.at(-1).type, 'done');
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_total', { outcome: 'cancelled' }) > cancelled0 &&
           m.get('fogline_kv_pages', { state: 'used' }) <= 4 && m.get('fogline_sequences_running') === 0;
  }, 10000, 'the dropped request to be cancelled and its pages freed');
  other.close();
});

test('a raw TCP client that sends garbage or closes mid-handshake does not disturb the server', async () => {
  await new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1', () => {
      s.write('GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n');
      s.destroy();
      resolve();
    });
    s.on('error', resolve);
  });
  await new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1', () => s.write('\x00\x01\x02 not http\r\n\r\n'));
    s.on('error', resolve);
    s.on('close', resolve);
    setTimeout(() => { s.destroy(); resolve(); }, 500);
  });
  const c = await connect(server);
  await stillServes(c);
  c.close();
});

test('upgrades elsewhere than /ws are refused with an HTTP status', async () => {
  const c = wsClient(`ws://127.0.0.1:${server.port}/nope`);
  await assert.rejects(c.opened, (e) => e.status === 404);
});
