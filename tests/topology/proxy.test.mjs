// topology.proxy: the Compose topology without Docker (redis-server, two `fogline serve`
// replicas, Debian's nginx with docker/nginx/fogline.conf) and what the proxy must get right:
// WebSocket chats stream drafts, commits and done through nginx and are spread over both
// replicas; OpenAI server-sent events arrive as they are written, not all at the end; the
// routes a deployment exposes (and /metrics, which it does not).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { wsClient, require, user, metrics } from '../server/lib.mjs';
import { startTopology, stopTopology, serverHasRedis, NO_REDIS_MESSAGE, servedBy, tag } from './topology.mjs';

const OpenAI = require('openai').default;

let topo;

before(async () => {
  // The proxy does not need Redis; the Compose topology has it, so it runs here when the
  // server can use it.
  const redis = serverHasRedis();
  if (!redis) process.stderr.write(`topology.proxy: note: ${NO_REDIS_MESSAGE}; replicas run without Redis\n`);
  topo = await startTopology({ redis });
});

after(async () => {
  if (!topo) return;
  const codes = await stopTopology(topo);
  assert.equal(codes.a, 0, `replica A did not exit 0 after SIGTERM:\n${topo.a.log()}`);
  assert.equal(codes.b, 0, `replica B did not exit 0 after SIGTERM:\n${topo.b.log()}`);
});

async function open(url) {
  const c = wsClient(url);
  await c.opened;
  c.hello = await c.next((f) => f.type === 'hello');
  return c;
}

test('health, readiness, the web UI and the API answer through nginx; /metrics does not', async () => {
  const n = topo.nginx.url;
  const health = await fetch(`${n}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: 'ok' });
  const ready = await fetch(`${n}/ready`);
  assert.equal(ready.status, 200);
  assert.equal((await ready.json()).status, 'ready');
  const index = await fetch(`${n}/`);
  assert.equal(index.status, 200);
  assert.match(await index.text(), /<html/i);
  const models = await fetch(`${n}/v1/models`);
  assert.equal(models.status, 200);
  assert.equal((await models.json()).object, 'list');
  // per-replica numbers are scraped from the replicas themselves, never through the balancer
  assert.equal((await fetch(`${n}/metrics`)).status, 403);
  assert.equal((await fetch(`${topo.a.url}/metrics`)).status, 200);
});

test('WebSocket chats stream drafts, commits and done through nginx, over both replicas', async () => {
  const prompts = ['Where is my order 48213?', 'My password expired.', 'How do I reset my router?',
    'Can I change my delivery address?'];
  // All connections open at once, so least_conn must put them on both replicas.
  const clients = await Promise.all(prompts.map(() => open(topo.nginx.wsUrl)));
  const t = tag();
  try {
    const results = await Promise.all(clients.map(async (c, i) => {
      assert.equal(c.hello.type, 'hello');
      assert.equal(typeof c.hello.model, 'string');
      const id = `proxy-${t}-${i}`;
      const sent = Date.now();
      // sequential unmasking: one token per step, so every block is drafted before it commits
      c.send({ type: 'chat', id, messages: user(prompts[i]), max_tokens: 48,
               decoding: { policy: 'sequential' } });
      const frames = [];
      const times = [];
      for (;;) {
        const f = await c.next((x) => x.id === id, 60000);
        frames.push(f);
        times.push(Date.now() - sent);
        if (f.type === 'done' || f.type === 'error') break;
      }
      return { id, frames, times };
    }));
    for (const { id, frames, times } of results) {
      const types = frames.map((f) => f.type);
      assert.ok(!types.includes('error'), `${id}: ${JSON.stringify(frames.at(-1))}`);
      assert.equal(types.at(-1), 'done', id);
      const drafts = frames.filter((f) => f.type === 'draft');
      const commits = frames.filter((f) => f.type === 'commit');
      assert.ok(drafts.length > 0, `${id}: no drafts came through (${types.join(',')})`);
      assert.ok(commits.length > 0, `${id}: no commits came through`);
      // a block was drafted before it was committed: the reply streamed, block by block
      const draftedFirst = commits.filter((c) =>
        frames.findIndex((f) => f.type === 'draft' && f.block === c.block) < frames.indexOf(c) &&
        frames.some((f) => f.type === 'draft' && f.block === c.block));
      assert.ok(draftedFirst.length > 0, `${id}: no block was drafted before its commit (${types.join(',')})`);
      assert.deepEqual(commits.map((f) => f.block), commits.map((_, k) => k), `${id}: commits out of order`);
      const done = frames.at(-1);
      assert.ok(['stop', 'length'].includes(done.finish), JSON.stringify(done));
      assert.ok(done.usage.prompt_tokens > 0 && done.usage.completion_tokens > 0, JSON.stringify(done.usage));
      // frames arrived while the reply was written, not in one burst at the end
      assert.ok(times.at(-1) - times[0] > 0, `${id}: every frame arrived at once (${times[0]} ms)`);
    }
    const who = await Promise.all(results.map((r) => servedBy(topo, r.id)));
    assert.ok(who.includes('a') && who.includes('b'),
      `nginx sent every chat to one replica (${who.join(',')}); least_conn should spread 4 concurrent connections`);
    // each replica counted the connections it was given
    const ma = await metrics(topo.a);
    const mb = await metrics(topo.b);
    assert.ok(ma.get('fogline_ws_connections_total') >= 1 && mb.get('fogline_ws_connections_total') >= 1);
  } finally {
    for (const c of clients) c.close();
  }
});

test('an OpenAI streaming request comes through nginx as it is written (no buffering)', async (t) => {
  const client = new OpenAI({ apiKey: 'unused', baseURL: `${topo.nginx.url}/v1`, maxRetries: 0 });
  const t0 = Date.now();
  const stream = await client.chat.completions.create({
    model: 'fogline',
    messages: user('My printer is offline and the light is blinking.'),
    max_tokens: 64,
    stream: true,
    stream_options: { include_usage: true },
    // one token per step: a reply of several blocks takes many engine steps to write
    decoding: { policy: 'sequential', pipeline: false },
  });
  const chunks = [];
  for await (const ch of stream) chunks.push({ ch, at: Date.now() - t0 });
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  assert.equal(chunks[0].ch.choices[0].delta.role, 'assistant');
  const content = chunks.filter((x) => x.ch.choices?.[0]?.delta?.content);
  assert.ok(content.length >= 2, `the reply came in ${content.length} content chunk(s); expected one per block`);
  const fin = chunks.find((x) => x.ch.choices?.[0]?.finish_reason);
  assert.ok(fin && ['stop', 'length'].includes(fin.ch.choices[0].finish_reason));
  const usage = chunks.at(-1).ch.usage;
  assert.ok(usage && usage.completion_tokens > 0, JSON.stringify(chunks.at(-1).ch));
  // Buffered by the proxy, every chunk would arrive together when the reply ends. Unbuffered,
  // the first block arrives while later blocks are still being denoised.
  const spread = content.at(-1).at - content[0].at;
  t.diagnostic(`content chunks at ${content.map((x) => x.at).join(', ')} ms`);
  assert.ok(spread >= 10,
    `all ${content.length} content chunks arrived within ${spread} ms of each other: the proxy buffered the stream ` +
    `(arrival times ${content.map((x) => x.at).join(', ')} ms)`);
  // the proxy's access log shows the request went through it
  assert.match(topo.nginx.accessLog(), /POST \/v1\/chat\/completions HTTP\/1\.1" 200/);
});
