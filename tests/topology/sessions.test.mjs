// topology.sessions: sessions shared through Redis by two replicas behind nginx (the Compose
// topology without Docker, see topology.mjs).
//
// A chat that names a "session" continues it: the server prepends the session's stored turns
// (from Redis) to the new message, so a client sends only its new message. To be independent
// of what the model answers, the test checks the server's own evidence, the `done` frame's
// usage.prompt_tokens:
//   - turn 2 continued on replica B counts more prompt tokens than its message alone;
//   - it counts exactly as many as the same turn continued on replica A (the same history,
//     seen from both replicas), and as the whole conversation sent explicitly;
//   - usage.history_messages (how many stored messages went first) is 2 after one turn;
// and that a session outlives its replica: SIGKILL in the middle of a reply, reconnect through
// nginx, and the other replica continues the conversation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { wsClient, user, metrics, stepUntil } from '../server/lib.mjs';
import { startTopology, stopTopology, servedBy, tag } from './topology.mjs';

let topo;
const killed = new Set(); // replicas a test killed on purpose

const M1 = 'Where is my order 48213?';
const M2 = 'It still has not arrived. Can you check again?';
const M3 = 'Thanks. Can I change the delivery address?';

before(async () => {
  topo = await startTopology({ redis: true, hold: true });
  await Promise.all([waitRedis(topo.a, 'A'), waitRedis(topo.b, 'B')]);
});

after(async () => {
  if (!topo) return;
  const codes = await stopTopology(topo);
  for (const k of ['a', 'b']) {
    if (killed.has(k)) assert.equal(codes[k], 'SIGKILL', `replica ${k}`);
    else assert.equal(codes[k], 0, `replica ${k.toUpperCase()} did not exit 0 after SIGTERM:\n${topo[k].log()}`);
  }
});

// A replica attaches to Redis in the background (a Redis fault is a cache miss, never a failed
// chat), so a session written before it attached would silently not be stored. Wait until the
// replica says it is connected: in its log or its metrics.
async function waitRedis(server, name, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    if (server.lines.some((l) => /event=redis_(connected|ready)\b/.test(l))) return;
    const m = await metrics(server).catch(() => null);
    if (m && (m.get('fogline_redis_up') === 1 || m.get('fogline_redis_connected') === 1)) return;
    if (Date.now() > end) {
      throw new Error(`replica ${name} did not report a Redis connection within ${ms} ms ` +
        `(no event=redis_connected line, no fogline_redis_up 1):\n${server.log()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

function within(promise, ms, what) {
  let timer;
  return Promise.race([promise, new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  })]).finally(() => clearTimeout(timer));
}

async function open(url) {
  const c = wsClient(url);
  await c.opened;
  c.hello = await c.next((f) => f.type === 'hello');
  return c;
}

// One turn: every frame of the request until done; fails on an error frame.
async function turn(c, { id, session, messages, ...rest }) {
  c.send({ type: 'chat', id, ...(session ? { session } : {}), messages, max_tokens: 48, ...rest });
  const frames = await c.collect(id, 60000);
  const done = frames.at(-1);
  assert.equal(done.type, 'done', `${id}: ${JSON.stringify(done)}`);
  if (session) assert.equal(done.session, session, `${id}: done does not echo the session`);
  const text = frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  return { frames, done, text, prompt: done.usage.prompt_tokens };
}

test('a session started on replica A continues on replica B (turn 2 sees turn 1)', async (t) => {
  const k = tag();
  const s1 = `topo-${k}-1`;
  const s2 = `topo-${k}-2`;
  const ca = await open(topo.a.wsUrl);
  const cb = await open(topo.b.wsUrl);
  try {
    // turn 1 of two sessions, both on A, with the same message (greedy: the same reply)
    const t1 = await turn(ca, { id: `${k}-s1-t1`, session: s1, messages: user(M1) });
    const t1b = await turn(ca, { id: `${k}-s2-t1`, session: s2, messages: user(M1) });
    assert.equal(t1b.text, t1.text, 'the same first turn gave two replies; the comparison below needs one');
    assert.equal(t1b.prompt, t1.prompt);
    // turn 2: only the new message; s1 continues on B, s2 on A
    const t2b = await turn(cb, { id: `${k}-s1-t2`, session: s1, messages: user(M2) });
    const t2a = await turn(ca, { id: `${k}-s2-t2`, session: s2, messages: user(M2) });
    // the new message alone (a session nobody has used) and the conversation sent in full
    const alone = await turn(cb, { id: `${k}-alone`, session: `topo-${k}-new`, messages: user(M2) });
    const full = await turn(cb, { id: `${k}-full`, messages: [
      { role: 'user', content: M1 }, { role: 'assistant', content: t1.text }, { role: 'user', content: M2 }] });
    t.diagnostic(`prompt tokens: turn 1 ${t1.prompt}; turn 2 on B ${t2b.prompt}, on A ${t2a.prompt}; ` +
      `alone ${alone.prompt}; explicit conversation ${full.prompt}`);
    assert.ok(t2b.prompt > alone.prompt,
      `turn 2 on replica B counted ${t2b.prompt} prompt tokens, its message alone ${alone.prompt}: ` +
      'B did not prepend the session that A stored');
    assert.ok(t2b.prompt > t1.prompt, 'turn 2 should hold turn 1 and more');
    assert.equal(t2b.prompt, t2a.prompt, 'replicas A and B see different histories for the same conversation');
    assert.equal(t2b.prompt, full.prompt,
      'the stored history is not the earlier turns (user message + the reply as committed)');
    // the server says so itself: two stored messages (turn 1's question and reply) went first
    assert.equal(t2b.done.usage.history_messages, 2, JSON.stringify(t2b.done.usage));
    assert.equal(t2a.done.usage.history_messages, 2, JSON.stringify(t2a.done.usage));
    assert.equal(alone.done.usage.history_messages, undefined, JSON.stringify(alone.done.usage));
    // turn 3 through nginx, wherever it lands, sees both earlier turns
    const cn = await open(topo.nginx.wsUrl);
    try {
      const t3 = await turn(cn, { id: `${k}-s1-t3`, session: s1, messages: user(M3) });
      assert.ok(t3.prompt > t2b.prompt, `turn 3: ${t3.prompt} prompt tokens, turn 2: ${t2b.prompt}`);
      assert.equal(t3.done.usage.history_messages, 4, JSON.stringify(t3.done.usage));
    } finally {
      cn.close();
    }
  } finally {
    ca.close();
    cb.close();
  }
});

test('SIGKILL of the replica mid-reply: the client reconnects through nginx and the session continues on the other replica', async (t) => {
  const k = tag();
  const s = `topo-${k}-kill`;
  const c1 = await open(topo.nginx.wsUrl);
  const t1 = await turn(c1, { id: `${k}-t1`, session: s, messages: user(M1) });
  const x = await servedBy(topo, `${k}-t1`);
  const y = x === 'a' ? 'b' : 'a';
  // turn 2 on the same connection (so on replica x), its engine held and stepped to turn 2's
  // first update: it is certainly still streaming at the kill (free-running, it can end within
  // a few milliseconds of its first update)
  const id2 = `${k}-t2`;
  await topo[x].hold();
  c1.send({ type: 'chat', id: id2, session: s, messages: user(M2), max_tokens: 256,
            decoding: { policy: 'sequential', pipeline: false } });
  await topo[x].waitLog(new RegExp(`event=submitted req="${id2}"`), 30000);
  await stepUntil(topo[x], c1, () => c1.frames.some((f) => f.id === id2));
  const first = c1.frames.find((f) => f.id === id2);
  assert.ok(first.type === 'draft' || first.type === 'commit', `turn 2 began with ${JSON.stringify(first)}`);
  killed.add(x);
  topo[x].proc.kill('SIGKILL');
  const close = await within(c1.closed, 10000, 'nginx to close the client of the killed replica');
  t.diagnostic(`replica ${x.toUpperCase()} killed; the client saw close ${close.code}`);
  assert.ok(!c1.frames.some((f) => f.id === id2 && f.type === 'done'),
    'turn 2 finished before the kill; the test needs a reply still streaming');
  assert.equal(await within(topo[x].exited, 10000, 'the killed replica to exit'), 'SIGKILL');

  // the first reconnect must succeed: nginx tries the dead replica, is refused, takes the other
  const c2 = await open(topo.nginx.wsUrl);
  try {
    const again = await turn(c2, { id: `${k}-t2-again`, session: s, messages: user(M2) });
    assert.equal(await servedBy(topo, `${k}-t2-again`), y);
    const alone = await turn(c2, { id: `${k}-alone`, messages: user(M2) });
    const full = await turn(c2, { id: `${k}-full`, messages: [
      { role: 'user', content: M1 }, { role: 'assistant', content: t1.text }, { role: 'user', content: M2 }] });
    t.diagnostic(`prompt tokens: resumed turn 2 ${again.prompt}; alone ${alone.prompt}; explicit ${full.prompt}`);
    assert.ok(again.prompt > alone.prompt,
      `the resumed turn counted ${again.prompt} prompt tokens, its message alone ${alone.prompt}: ` +
      `replica ${y.toUpperCase()} did not continue the session`);
    assert.equal(again.prompt, full.prompt,
      'the resumed history is not turn 1 alone (the interrupted turn must not be in it, nor be missing turn 1)');
    assert.equal(again.done.usage.history_messages, 2, JSON.stringify(again.done.usage));
  } finally {
    c2.close();
  }
  // the balancer keeps working with one replica: new connections and HTTP requests succeed
  for (let i = 0; i < 3; i++) {
    const c = await open(topo.nginx.wsUrl);
    c.send({ type: 'ping', id: `p${i}` });
    assert.equal((await c.next((f) => f.type === 'pong')).id, `p${i}`);
    c.close();
    assert.equal((await fetch(`${topo.nginx.url}/health`)).status, 200);
  }
});
