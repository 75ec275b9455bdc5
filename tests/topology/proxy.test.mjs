// topology.proxy: the Compose topology without Docker (redis-server, two `fogline serve`
// replicas, Debian's nginx with docker/nginx/fogline.conf) and what the proxy must get right:
// WebSocket chats stream drafts, commits and done through nginx and are spread over both
// replicas; OpenAI server-sent events arrive as they are written, not all at the end; the
// routes a deployment exposes (and /metrics, which it does not).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { wsClient, require, user, metrics, until } from '../server/lib.mjs';
import { startTopology, stopTopology, servedBy, tag } from './topology.mjs';

const OpenAI = require('openai').default;

let topo;

before(async () => {
  // The proxy does not need Redis; the Compose topology has it, so it runs here too.
  topo = await startTopology({ redis: true, hold: true });
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
  const ids = prompts.map((_, i) => `proxy-${t}-${i}`);
  try {
    // sequential unmasking: one token per step, so every block is drafted before it commits.
    // Both engines held and stepped one forward at a time, every client's frames in (a ping
    // through nginx) before the next: no draft is superseded by its commit because a loop ran
    // late, and a reply cannot end before its first draft is through.
    await topo.a.hold();
    await topo.b.hold();
    clients.forEach((c, i) => c.send({ type: 'chat', id: ids[i], messages: user(prompts[i]), max_tokens: 48,
                                      decoding: { policy: 'sequential' } }));
    await Promise.all(ids.map((id) => servedBy(topo, id, 30000)));
    const over = (c, i) => c.frames.some((f) => f.id === ids[i] && (f.type === 'done' || f.type === 'error'));
    for (let n = 0; !clients.every(over); n++) {
      assert.ok(n < 2000, 'the replies did not end in 2000 forwards');
      await Promise.all([topo.a.step(), topo.b.step()]);
      await Promise.all(clients.map((c) => c.sync()));
    }
    await topo.a.release();
    await topo.b.release();
    const results = await Promise.all(clients.map(async (c, i) => {
      assert.equal(c.hello.type, 'hello');
      assert.equal(typeof c.hello.model, 'string');
      const id = ids[i];
      const frames = [];
      for (;;) {
        const f = await c.next((x) => x.id === id, 60000);
        frames.push(f);
        if (f.type === 'done' || f.type === 'error') break;
      }
      return { id, frames };
    }));
    for (const { id, frames } of results) {
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
  for await (const ch of stream) chunks.push({ ch });
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  assert.equal(chunks[0].ch.choices[0].delta.role, 'assistant');
  const content = chunks.filter((x) => x.ch.choices?.[0]?.delta?.content);
  assert.ok(content.length >= 2, `the reply came in ${content.length} content chunk(s); expected one per block`);
  const fin = chunks.find((x) => x.ch.choices?.[0]?.finish_reason);
  assert.ok(fin && ['stop', 'length'].includes(fin.ch.choices[0].finish_reason));
  const usage = chunks.at(-1).ch.usage;
  assert.ok(usage && usage.completion_tokens > 0, JSON.stringify(chunks.at(-1).ch));

  // Unbuffered? Both engines are held and stepped one forward at a time until a replica has
  // written the reply's first content chunk (fogline_commits_sent_total); the reply is then
  // unfinished, and stays so while the engines are held. An unbuffered proxy delivers that chunk
  // however slow the machine or the client; a buffering one holds it until the reply ends, which
  // cannot happen before the engines are released, so the read would never come: a watchdog ends
  // that wait (a failure path only: a passing run never waits on it).
  const sum = async (name) => {
    const [ma, mb] = await Promise.all([metrics(topo.a), metrics(topo.b)]);
    return (ma.get(name) ?? 0) + (mb.get(name) ?? 0);
  };
  await topo.a.hold();
  await topo.b.hold();
  let held = true;
  let timer;
  try {
    const sent0 = await sum('fogline_commits_sent_total');
    const resP = fetch(`${topo.nginx.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fogline', messages: user('My printer is offline and the light is blinking.'),
        max_tokens: 64, stream: true, decoding: { policy: 'sequential', pipeline: false } }),
    });
    await until(async () => (await sum('fogline_requests_active')) > 0, 30000, 'the request to reach a replica');
    for (let n = 0; (await sum('fogline_commits_sent_total')) === sent0; n++) {
      assert.ok(n < 2000, 'no content was written in 2000 forwards');
      await Promise.all([topo.a.step(), topo.b.step()]);
    }
    const res = await resP;
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    const hasContent = () => /"delta":\{"content":"[^"]/.test(text);
    const buffered = new Promise((_, rej) => {
      timer = setTimeout(() => rej(new Error('the first block did not come through nginx while the reply was ' +
        'unfinished: the proxy buffered the stream')), 30000);
    });
    while (!hasContent()) {
      const { value, done } = await Promise.race([reader.read(), buffered]);
      assert.ok(!done, `the stream ended before any content: ${text}`);
      text += dec.decode(value, { stream: true });
    }
    clearTimeout(timer);
    assert.ok(!text.includes('data: [DONE]'), 'the reply ended while the engines were held');
    await topo.a.release();
    await topo.b.release();
    held = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    assert.ok(text.indexOf('data: [DONE]') > text.search(/"delta":\{"content":"[^"]/), text);
  } finally {
    clearTimeout(timer);
    if (held) {
      await topo.a.release();
      await topo.b.release();
    }
  }
  // the proxy's access log shows the request went through it
  assert.match(topo.nginx.accessLog(), /POST \/v1\/chat\/completions HTTP\/1\.1" 200/);
});
