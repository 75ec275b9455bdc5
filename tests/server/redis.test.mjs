// Redis, the cross-session cache (docs/redis.md): a real redis-server on a loopback port.
//   - sessions: a conversation started on one server process continues on a second one;
//   - KV pages: a second process reuses a long shared prefix (pages loaded, not computed) and
//     gives the same output as without the cache;
//   - faults: Redis killed mid-stream and restarted, damaged pages, a "Redis" that accepts and
//     never answers, a stopped (SIGSTOP) Redis, a full Redis, Redis absent at start: every chat
//     completes, the loop never blocks, metrics say what happened.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { BIN, MODEL, startServer, connect, user, freePort, metrics, until } from './lib.mjs';
import { startRedis, cli, scan, settled } from './redis_lib.mjs';

const kvKeys = (port) => scan(port, 'fogline:kv:*');

// Waits until the server has written its pages (the count stops moving).

async function chat(server, messages, extra = {}) {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'r', messages, max_tokens: 48, ...extra });
  const frames = await c.collect('r', 60000);
  c.close();
  const done = frames[frames.length - 1];
  assert.equal(done.type, 'done', JSON.stringify(done));
  return { done, text: frames.filter((f) => f.type === 'commit').map((f) => f.text).join('') };
}

const model = MODEL ? ['--model', MODEL] : [];
// a long system prompt: a shared prefix of many blocks (20 rules: ~345 tokens with the
// built-in tokenizer, which has merges for these words)
const SYSTEM = 'You are the help desk of an online shop. ' +
  Array.from({ length: 20 }, (_, i) => `Rule ${i + 1}: answer politely and copy order numbers exactly.`).join(' ');

test('a session continues on a second server process with its earlier turns', async () => {
  const r = await startRedis();
  const a = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(a)).get('fogline_redis_connected') === 1, 10000, 'A connected');
  const t1 = await chat(a, user('Hi, I am Dana. Where is my order 48213?'), { session: 'dana-1' });
  assert.equal(t1.done.session, 'dana-1');
  assert.equal(t1.done.usage.history_messages, undefined);
  await until(async () => (await metrics(a)).get('fogline_session_total', { outcome: 'written' }) === 1, 5000, 'session write');
  const stored = JSON.parse(await cli(r.port, ['GET', 'fogline:session:dana-1']));
  assert.equal(stored.messages.length, 2);
  assert.equal(stored.messages[1].role, 'assistant');
  assert.equal(stored.messages[1].content, t1.text);
  assert.equal(stored.ids.length, t1.done.usage.prompt_tokens + t1.done.usage.completion_tokens);
  const ttl = Number((await cli(r.port, ['TTL', 'fogline:session:dana-1'])).trim());
  assert.ok(ttl > 86000 && ttl <= 86400, `session TTL ${ttl}`);
  assert.equal(await a.stop(), 0);

  const b = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(b)).get('fogline_redis_connected') === 1, 10000, 'B connected');
  const alone = await chat(b, user('Can you cancel it?'));
  const t2 = await chat(b, user('Can you cancel it?'), { session: 'dana-1' });
  assert.equal(t2.done.usage.history_messages, 2);
  // the earlier turns are in the prompt: turn 1's prompt and reply, plus this message
  assert.ok(t2.done.usage.prompt_tokens >= alone.done.usage.prompt_tokens +
    t1.done.usage.prompt_tokens + t1.done.usage.completion_tokens - 4,
  `${t2.done.usage.prompt_tokens} vs ${alone.done.usage.prompt_tokens} + turn 1`);
  // turn 1's pages (written by A) serve the shared start of turn 2's prompt
  assert.ok(t2.done.usage.cached_tokens >= 16, `cached ${t2.done.usage.cached_tokens}`);
  const m = await metrics(b);
  assert.equal(m.get('fogline_session_total', { outcome: 'hit' }), 1);
  await until(async () => (await metrics(b)).get('fogline_session_total', { outcome: 'written' }) === 1, 5000, 'turn 2 written');
  const s2 = JSON.parse(await cli(r.port, ['GET', 'fogline:session:dana-1']));
  assert.equal(s2.messages.length, 4);
  assert.equal(s2.messages[2].content, 'Can you cancel it?');
  assert.equal(s2.messages[3].content, t2.text);
  // the OpenAI endpoint takes the same extension field; usage reports the cached tokens
  const res = await fetch(`${b.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ session: 'dana-1', messages: user('Thanks!'), max_tokens: 24 }),
  });
  assert.equal(res.status, 200);
  const oa = await res.json();
  assert.ok(oa.usage.prompt_tokens > t2.done.usage.prompt_tokens, `openai turn 3 prompt ${oa.usage.prompt_tokens}`);
  assert.ok(oa.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(oa.usage));
  await until(async () => (await metrics(b)).get('fogline_session_total', { outcome: 'written' }) === 2, 5000, 'turn 3 written');
  assert.equal(JSON.parse(await cli(r.port, ['GET', 'fogline:session:dana-1'])).messages.length, 6);
  const bad = await fetch(`${b.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ session: 7, messages: user('hi') }),
  });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'session');
  // a client that sends the whole conversation with its session (the web UI does) is not
  // given the history twice
  const whole = [...user('Hi, I am Dana. Where is my order 48213?'), { role: 'assistant', content: t1.text },
    ...user('Can you cancel it?'), { role: 'assistant', content: t2.text }, ...user('Thanks!'), { role: 'assistant', content: oa.choices[0].message.content },
    ...user('Bye')];
  const nosess = await chat(b, whole);
  const withsess = await chat(b, whole, { session: 'dana-1' });
  assert.equal(withsess.done.usage.prompt_tokens, nosess.done.usage.prompt_tokens);
  assert.equal(withsess.done.usage.history_messages, 6);
  // an unknown session is a new conversation
  const fresh = await chat(b, user('Can you cancel it?'), { session: 'nobody' });
  assert.equal(fresh.done.usage.prompt_tokens, alone.done.usage.prompt_tokens);
  assert.equal(fresh.text, alone.text);
  // DELETE /sessions/ID forgets it now: the next turn starts afresh; again it is not there
  const c = await connect(b);
  assert.equal(c.hello.sessions, true);
  c.close();
  const del = async (p, init = { method: 'DELETE' }) => {
    const res = await fetch(`${b.url}/sessions/${p}`, init);
    return { status: res.status, allow: res.headers.get('allow'), json: await res.json() };
  };
  assert.deepEqual((await del('dana-1')).json, { id: 'dana-1', object: 'session', deleted: true });
  assert.equal(await cli(r.port, ['EXISTS', 'fogline:session:dana-1']), '0\n');
  const after = await chat(b, user('Can you cancel it?'), { session: 'dana-1' });
  assert.equal(after.done.usage.history_messages, undefined);
  assert.equal(after.done.usage.prompt_tokens, alone.done.usage.prompt_tokens);
  // any name a session may have, URL-encoded (a '?' and a '/' in it too)
  const odd = 'ü?x/ y#1';
  await chat(b, user('Hi'), { session: odd });
  await until(async () => (await cli(r.port, ['EXISTS', `fogline:session:${odd}`])) === '1\n', 5000, 'stored');
  assert.equal((await del(encodeURIComponent(odd))).json.id, odd);
  assert.equal(await cli(r.port, ['EXISTS', `fogline:session:${odd}`]), '0\n');
  const gone = await del('dana-2');
  assert.equal(gone.status, 404);
  assert.match(gone.json.error.message, /no stored session 'dana-2'/);
  const get = await del('dana-1', {});
  assert.equal(get.status, 405);
  assert.equal(get.allow, 'DELETE');
  assert.equal((await del('%FF')).status, 404);
  assert.equal(await b.stop(), 0);
  // without --redis: nothing to forget, and hello says so
  const plain = await startServer([]);
  const pc = await connect(plain);
  assert.equal(pc.hello.sessions, false);
  pc.close();
  const none = await fetch(`${plain.url}/sessions/dana-1`, { method: 'DELETE' });
  assert.equal(none.status, 404);
  assert.match((await none.json()).error.message, /without --redis/);
  assert.equal(await plain.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('a long shared prefix is loaded from Redis by a second process, same output', async () => {
  const r = await startRedis();
  const msgs = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Where is my order 48213?' }];
  const a = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(a)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const cold = await chat(a, msgs);
  const coldForwarded = (await metrics(a)).get('fogline_tokens_forwarded_total');
  assert.equal(cold.done.usage.cached_tokens, 0);
  assert.ok(cold.done.usage.prompt_tokens > 300, `prompt ${cold.done.usage.prompt_tokens}`);
  assert.equal(await a.stop(), 0);
  const n = await settled(r.port);
  assert.ok(n > 40, `${n} keys`);
  const b = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(b)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const warm = await chat(b, msgs);
  const B = 8;
  const P = warm.done.usage.prompt_tokens;
  assert.equal(warm.done.usage.cached_tokens, Math.floor((P - 1) / B) * B, 'every whole block but the last is loaded');
  assert.equal(warm.text, cold.text, 'same output with and without the cache');
  // the loaded positions are not computed again: counted, not timed (a prefill time compared
  // with another run's raced the machine's load)
  const m = await metrics(b);
  assert.equal(coldForwarded - m.get('fogline_tokens_forwarded_total'), warm.done.usage.cached_tokens,
    `positions computed: ${coldForwarded} cold, ${m.get('fogline_tokens_forwarded_total')} warm`);
  assert.equal(m.get('fogline_kv_cache_pages_total', { outcome: 'hit' }), warm.done.usage.cached_tokens / B);
  assert.equal(m.get('fogline_kv_cache_tokens_total'), warm.done.usage.cached_tokens);
  // the size cap holds: pages are not duplicated (one key per page, SET NX)
  const keys = await kvKeys(r.port);
  assert.equal(Number((await cli(r.port, ['ZCARD', 'fogline:kv:lru'])).trim()), keys.length);
  assert.equal(await b.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('damaged pages in Redis are refused: same output, counted', async () => {
  const r = await startRedis();
  const msgs = [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'I want to return my blender.' }];
  const a = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(a)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const cold = await chat(a, msgs);
  await settled(r.port);
  // 1. one bit flipped near the end of every page (the header stays valid: the checksum finds it)
  const keys = await kvKeys(r.port);
  for (const k of keys) {
    const len = Number((await cli(r.port, ['STRLEN', k])).trim());
    const byte = await cli(r.port, ['GETRANGE', k, String(len - 3), String(len - 3)], 'buffer');
    const flipped = String.fromCharCode((byte[0] ^ 0x01) & 0x7f || 0x41);
    await cli(r.port, ['SETRANGE', k, String(len - 3), flipped]);
  }
  const b = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(b)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const d1 = await chat(b, msgs);
  assert.equal(d1.text, cold.text);
  assert.equal(d1.done.usage.cached_tokens, 0);
  assert.ok((await metrics(b)).get('fogline_kv_cache_pages_total', { outcome: 'rejected' }) >= 1);
  assert.equal(await b.stop(), 0);
  // 2. values replaced by garbage of the wrong size
  await settled(r.port);
  for (const k of await kvKeys(r.port)) await cli(r.port, ['SET', k, 'garbage']);
  const c = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(c)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const d2 = await chat(c, msgs);
  assert.equal(d2.text, cold.text);
  assert.equal(d2.done.usage.cached_tokens, 0);
  assert.ok((await metrics(c)).get('fogline_kv_cache_pages_total', { outcome: 'rejected' }) >= 1);
  // 3. a session value that is not a conversation: the turn runs without history
  await cli(r.port, ['SET', 'fogline:session:bad', '{"messages":[{"role":"wizard","content":1}]}']);
  const d3 = await chat(c, user('Where is my order 48213?'), { session: 'bad' });
  assert.equal(d3.done.usage.history_messages, undefined);
  assert.equal((await metrics(c)).get('fogline_session_total', { outcome: 'error' }), 1);
  // ... nor are damaged tool calls: not JSON, not an array, not a string, or on a user message
  const damaged = [{ role: 'assistant', content: '', tool_calls_text: 'not json' },
    { role: 'assistant', content: '', tool_calls_text: '{"name":"f"}' },
    { role: 'assistant', content: '', tool_calls_text: '[]' },
    { role: 'assistant', content: '', tool_calls_text: [{ name: 'f' }] },
    { role: 'user', content: 'hi', tool_calls_text: '[{"type":"function","function":{"name":"f","arguments":{}}}]' }];
  for (const [k, m] of damaged.entries()) {
    await cli(r.port, ['SET', `fogline:session:bad${k}`, JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, m] })]);
    const d = await chat(c, user('Where is my order 48213?'), { session: `bad${k}` });
    assert.equal(d.done.usage.history_messages, undefined, JSON.stringify(m));
    assert.equal(d.done.usage.prompt_tokens, d3.done.usage.prompt_tokens);
    assert.equal((await metrics(c)).get('fogline_session_total', { outcome: 'error' }), 2 + k);
  }
  assert.equal(await c.stop(), 0);
  assert.equal(await a.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('Redis killed during a stream, then restarted: chats complete, the server reattaches', async () => {
  const r = await startRedis();
  const s = await startServer(['--redis', r.url, '--redis-timeout-ms', '200']);
  await until(async () => (await metrics(s)).get('fogline_redis_connected') === 1, 10000, 'connected');
  const c = await connect(s);
  c.send({ type: 'chat', id: 'k', session: 'kill-1', messages: [{ role: 'system', content: SYSTEM }, ...user('Where is my order 48213?')], max_tokens: 64 });
  await c.next((f) => f.id === 'k' && (f.type === 'draft' || f.type === 'commit'), 30000);
  r.proc.kill('SIGKILL');
  const frames = await c.collect('k', 60000);
  assert.equal(frames[frames.length - 1].type, 'done');
  c.close();
  await until(async () => (await metrics(s)).get('fogline_redis_connected') === 0, 10000, 'disconnect seen');
  // while Redis is away (it cannot answer: it is not running) a session turn completes
  const d = await chat(s, user('Can you cancel it?'), { session: 'kill-1' });
  assert.equal(d.done.finish !== undefined, true);
  // Redis comes back on the same port: the server reconnects (backoff <= 5 s) and writes again
  const r2 = await startRedis(r.port);
  await until(async () => (await metrics(s)).get('fogline_redis_connected') === 1, 15000, 'reconnected');
  await chat(s, user('Where is my order 48213?'), { session: 'kill-2' });
  await until(async () => (await cli(r2.port, ['EXISTS', 'fogline:session:kill-2'])).trim() === '1', 5000, 'session written after restart');
  const m = await metrics(s);
  assert.ok(m.get('fogline_redis_disconnects_total') >= 1);
  assert.ok(m.get('fogline_redis_connects_total') >= 2);
  assert.equal(await s.stop(), 0);
  r2.proc.kill('SIGKILL');
});

test('a Redis that accepts but never answers, and a stopped Redis: chats complete', async () => {
  // 1. a TCP server that accepts and never writes a byte
  const mute = net.createServer(() => {});
  const held = [];
  mute.on('connection', (sock) => held.push(sock));
  await new Promise((res) => mute.listen(0, '127.0.0.1', res));
  const port = mute.address().port;
  const s = await startServer(['--redis', `redis://127.0.0.1:${port}`, '--redis-connect-timeout-ms', '200']);
  await until(async () => (await metrics(s)).get('fogline_redis_connect_failures_total') >= 1, 10000, 'connect deadline');
  // not held up by Redis: it completes although the mute server never answers anything
  const d = await chat(s, user('Where is my order 48213?'), { session: 'mute' });
  assert.equal(d.done.type, 'done');
  const m = await metrics(s);
  assert.equal(m.get('fogline_redis_connected'), 0);
  assert.equal(m.get('fogline_session_total', { outcome: 'error' }), 1);
  assert.equal(await s.stop(), 0);
  for (const x of held) x.destroy();
  mute.close();

  // 2. a real Redis, stopped with SIGSTOP while the server is attached
  const r = await startRedis();
  const s2 = await startServer(['--redis', r.url, '--redis-timeout-ms', '150', '--redis-connect-timeout-ms', '300']);
  await until(async () => (await metrics(s2)).get('fogline_redis_connected') === 1, 10000, 'connected');
  r.proc.kill('SIGSTOP');
  try {
    for (let i = 0; i < 4; i++) {
      // each chat completes while Redis is stopped (it cannot answer): the command deadlines,
      // counted below, ended the waits
      const x = await chat(s2, [{ role: 'system', content: SYSTEM }, ...user('Where is my order 48213?')], { session: `stop-${i}` });
      assert.equal(x.done.type, 'done');
    }
    const m2 = await metrics(s2);
    assert.ok(m2.get('fogline_redis_timeouts_total') >= 1, 'timeouts counted');
    // three timeouts in a row: the connection is dropped rather than left hanging
    await until(async () => (await metrics(s2)).get('fogline_redis_connected') === 0, 10000, 'dropped');
  } finally {
    r.proc.kill('SIGCONT');
  }
  await until(async () => (await metrics(s2)).get('fogline_redis_connected') === 1, 15000, 'reattached after SIGCONT');
  assert.equal(await s2.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('a full Redis (maxmemory, noeviction): writes fail, chats complete', async () => {
  const r = await startRedis(0, ['--maxmemory', '1200kb', '--maxmemory-policy', 'noeviction']);
  const s = await startServer(['--redis', r.url]);
  await until(async () => (await metrics(s)).get('fogline_redis_connected') === 1, 10000, 'connected');
  for (let i = 0; i < 3; i++) {
    const d = await chat(s, [{ role: 'system', content: `${SYSTEM} Ticket ${i}.` }, ...user('Where is my order 48213?')], { session: `full-${i}` });
    assert.equal(d.done.type, 'done');
  }
  await until(async () => (await metrics(s)).get('fogline_redis_errors_total') >= 1, 10000, 'OOM errors counted');
  assert.equal(await s.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('the server starts without Redis and attaches when it appears; the cap evicts', async () => {
  const port = await freePort();
  const s = await startServer(['--redis', `redis://127.0.0.1:${port}/2`, '--redis-kv-cap-mb', '1']);
  const m0 = await metrics(s);
  assert.equal(m0.get('fogline_redis_connected'), 0);
  const d = await chat(s, user('Where is my order 48213?'), { session: 'early' });
  assert.equal(d.done.type, 'done');
  const r = await startRedis(port);
  await until(async () => (await metrics(s)).get('fogline_redis_connected') === 1, 15000, 'attached');
  // db 2 of the URL is used; a 1 MiB cap keeps at most 1 MiB / blob size pages
  await chat(s, [{ role: 'system', content: SYSTEM }, ...user('Where is my order 48213?')]);
  await chat(s, [{ role: 'system', content: `Second shop. ${SYSTEM}` }, ...user('Where is my order 48213?')]);
  await until(async () => (await metrics(s)).get('fogline_kv_cache_evicted_total') > 0, 10000, 'evictions');
  const keys = (await cli(port, ['-n', '2', '--scan', '--pattern', 'fogline:kv:*'])).split('\n').filter((k) => k && k !== 'fogline:kv:lru');
  const blob = Number((await cli(port, ['-n', '2', 'STRLEN', keys[0]])).trim());
  assert.ok(keys.length <= Math.floor((1 << 20) / blob), `${keys.length} pages of ${blob} bytes under a 1 MiB cap`);
  assert.equal(Number((await cli(port, ['-n', '0', 'DBSIZE'])).trim()), 0, 'db 0 untouched');
  const ttl = Number((await cli(port, ['-n', '2', 'TTL', keys[0]])).trim());
  assert.ok(ttl > 3500 && ttl <= 3600, `page TTL ${ttl}`);
  assert.equal(await s.stop(), 0);
  r.proc.kill('SIGKILL');
});

test('bad Redis flags: one line, exit 2', async () => {
  const run = (args) => new Promise((resolve) => {
    const p = spawn(BIN, ['serve', ...model, ...args]);
    let err = '';
    p.stderr.on('data', (x) => (err += x));
    p.on('exit', (code) => resolve({ code, err }));
  });
  for (const [args, re] of [
    [['--redis', 'http://localhost:6379'], /only redis:\/\//],
    [['--redis', 'redis://:6379'], /no host/],
    [['--redis', 'redis://localhost:99999'], /bad Redis port/],
    [['--redis', 'redis://localhost:6379/x'], /database/],
    [['--redis-timeout-ms', '0'], /--redis-timeout-ms needs an integer/],
    [['--redis-kv-cap-mb', 'lots'], /--redis-kv-cap-mb/],
  ]) {
    const r = await run(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.equal(r.err.trim().split('\n').length, 1, r.err);
    assert.match(r.err, re);
  }
});
