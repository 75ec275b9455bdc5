// Seeds (docs/protocol.md, *Seeds*): a sampled request that sends no `seed` gets a fresh one
// from the server, as OpenAI and vLLM do (a chat UI's "regenerate" must not return the same
// reply every time), and the server says which: the `fogline-seed` header on every HTTP route,
// `seed` in the WebSocket's done. Sending that seed back reproduces the reply, and it is the
// reply `fogline generate --seed` gives (an independent path: the CLI takes the seed as given).
// With `--seed N` the server's sequence of seeds starts from N: the same flags give the same
// requests the same seeds after a restart. A greedy request has no seed to report.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer, connect, BIN, MODEL } from './lib.mjs';

const DIR = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
// a prompt outside the built-in model's training data, where it is unsure and seeds matter
const Q = 'Tell me about zebras and pianos.';
const msgs = [{ role: 'user', content: Q }];
const HOT = { temperature: 1.5, max_tokens: 24 };

let server;

before(async () => {
  server = await startServer([]);
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, server.log());
});

async function post(s, path, body) {
  const res = await fetch(`${s.url}${path}`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, seed: res.headers.get('fogline-seed'), text,
    json: text.startsWith('{') ? JSON.parse(text) : null };
}

// the header's seed: a decimal integer below 2^52 (so that seed + i of n choices can be sent)
function seedOf(r, what) {
  assert.match(r.seed ?? '', /^(0|[1-9][0-9]*)$/, `${what}: fogline-seed header ${r.seed}`);
  const s = Number(r.seed);
  assert.ok(Number.isSafeInteger(s) && s < 2 ** 52, `${what}: seed ${r.seed} below 2^52`);
  return s;
}

function generate(seed) {
  const r = spawnSync(BIN, ['generate', '--model', DIR, '--json', '--prompt', Q, '--max-tokens',
    String(HOT.max_tokens), '--temperature', String(HOT.temperature), '--seed', String(seed),
    '--threads', '2'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).text;
}

const content = (r) => r.json.choices[0].message.content;

test('chat completions without a seed: a fresh seed each time, reported, that reproduces the reply', async () => {
  const seen = new Set();
  for (let i = 0; i < 3; i++) {
    const r = await post(server, '/v1/chat/completions', { messages: msgs, ...HOT });
    assert.equal(r.status, 200, r.text);
    const s = seedOf(r, `request ${i}`);
    assert.ok(!seen.has(s), `request ${i} got seed ${s} again`);
    seen.add(s);
    const again = await post(server, '/v1/chat/completions', { messages: msgs, ...HOT, seed: s });
    assert.equal(again.seed, String(s), 'a request\'s own seed is the one reported');
    assert.equal(content(again), content(r), `seed ${s} sent back gives the same reply`);
    assert.equal(content(r), generate(s), `seed ${s}: the reply of fogline generate --seed ${s}`);
  }
  // streamed: the header comes before the first chunk; the text is the seed's
  const r = await post(server, '/v1/chat/completions', { messages: msgs, ...HOT, stream: true });
  assert.equal(r.status, 200, r.text);
  const s = seedOf(r, 'streamed');
  assert.ok(!seen.has(s), 'the streamed request got a seed of its own');
  let text = '';
  for (const line of r.text.split('\n'))
    if (line.startsWith('data: {')) text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '';
  assert.equal(text, generate(s), 'streamed: the reply of its reported seed');
  // a web page on another origin may read the header (CORS exposes it)
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', origin: 'http://example.test' },
    body: JSON.stringify({ messages: msgs, ...HOT, max_tokens: 4 }) });
  await res.text();
  assert.equal(res.status, 200);
  assert.match(res.headers.get('access-control-expose-headers') ?? '', /\bfogline-seed\b/);
  seedOf({ seed: res.headers.get('fogline-seed') }, 'cross-origin');
});

test('n choices, text completions and /generate: the reported seed is choice 0\'s, choice i has seed + i', async () => {
  const r = await post(server, '/v1/chat/completions', { messages: msgs, ...HOT, n: 2 });
  assert.equal(r.status, 200, r.text);
  const s = seedOf(r, 'n 2');
  for (const i of [0, 1]) {
    const one = await post(server, '/v1/chat/completions', { messages: msgs, ...HOT, seed: s + i });
    assert.equal(r.json.choices[i].message.content, content(one), `choice ${i} is seed ${s} + ${i}`);
  }
  const tk = await post(server, '/tokenize', { messages: msgs });
  const c = await post(server, '/v1/completions', { prompt: tk.json.tokens, ...HOT });
  assert.equal(c.status, 200, c.text);
  const cs = seedOf(c, '/v1/completions');
  assert.equal(c.json.choices[0].text, generate(cs), '/v1/completions: its seed\'s reply');
  const g = await post(server, '/generate', { segments: [Q], ...HOT });
  assert.equal(g.status, 200, g.text);
  const gs = seedOf(g, '/generate');
  assert.deepEqual(g.json.output, [generate(gs)], '/generate: its seed\'s reply');
  assert.equal(new Set([s, cs, gs]).size, 3, 'every request drew its own seed');
});

test('the WebSocket\'s done carries the seed; a greedy request reports none', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'hot', messages: msgs, ...HOT });
  const frames = await c.collect('hot');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.ok(Number.isSafeInteger(done.seed) && done.seed >= 0 && done.seed < 2 ** 52, `done.seed ${done.seed}`);
  const text = frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  assert.equal(text, generate(done.seed), 'the WebSocket reply is its seed\'s');
  c.send({ type: 'chat', id: 'mine', messages: msgs, ...HOT, seed: 77 });
  assert.equal((await c.collect('mine')).at(-1).seed, 77, 'a chat\'s own seed is reported as sent');
  c.send({ type: 'chat', id: 'greedy', messages: msgs, max_tokens: 8, temperature: 0 });
  const g = (await c.collect('greedy')).at(-1);
  assert.equal(g.type, 'done');
  assert.ok(!('seed' in g), `a greedy done has no seed: ${JSON.stringify(g)}`);
  c.close();
  const h = await post(server, '/v1/chat/completions', { messages: msgs, max_tokens: 8, temperature: 0 });
  assert.equal(h.status, 200, h.text);
  assert.equal(h.seed, null, 'a greedy HTTP reply has no fogline-seed header');
});

// three sampled requests without a seed, one after the other: their seeds
async function threeSeeds(s) {
  const out = [];
  for (let i = 0; i < 3; i++) {
    const r = await post(s, '/v1/chat/completions', { messages: msgs, ...HOT, max_tokens: 4 });
    assert.equal(r.status, 200, r.text);
    out.push(seedOf(r, `--seed run, request ${i}`));
  }
  return out;
}

test('--seed N: a restarted server gives the same requests the same seeds; another N others', async () => {
  const runs = [];
  for (const n of ['5', '5', '6']) {
    const s = await startServer(['--seed', n]);
    try {
      await s.waitLog(/event=decoding .*seeds=from_flag/);
      runs.push(await threeSeeds(s));
    } finally {
      assert.equal(await s.stop(), 0, s.log());
    }
  }
  assert.deepEqual(runs[1], runs[0], '--seed 5 twice: the same three seeds');
  assert.equal(new Set(runs[0]).size, 3, 'three requests, three seeds');
  assert.notDeepEqual(runs[2], runs[0], '--seed 6 starts elsewhere');
  await server.waitLog(/event=decoding .*seeds=random/); // without --seed: from random bytes
});

test('the WebSocket\'s n: choice i is the chat alone with seed + i, its frames tagged with segment i', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'n3', messages: msgs, ...HOT, n: 3, seed: 40 });
  const frames = await c.collect('n3');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.equal(done.seed, 40);
  assert.deepEqual(done.segments.map((s) => s.segment), [0, 1, 2]);
  for (let i = 0; i < 3; i++) {
    const mine = frames.filter((f) => f.segment === i);
    assert.equal(mine.at(-1).type, 'segment_done', `choice ${i} ends with segment_done`);
    assert.equal(mine.at(-1).seed, 40 + i);
    const text = mine.filter((f) => f.type === 'commit').map((f) => f.text).join('');
    assert.equal(text, generate(40 + i), `choice ${i}: the reply of seed ${40 + i}`);
  }
  // without a seed: the drawn one is the group's, choice i has it + i
  c.send({ type: 'chat', id: 'n2', messages: msgs, ...HOT, n: 2 });
  const f2 = await c.collect('n2');
  const s = f2.at(-1).seed;
  assert.deepEqual(f2.filter((f) => f.type === 'segment_done').map((f) => f.seed).sort(), [s, s + 1]);
  // bad n: out of range, or with what a group of samples cannot be
  for (const [extra, code, re] of [[{ n: 0 }, 'out_of_range', /'n' must be in \[1, 16\]/],
    [{ n: 17 }, 'out_of_range', /'n' must be in \[1, 16\]/], [{ n: 1.5 }, 'bad_request', /'n'/],
    [{ n: 2, session: 's1' }, 'bad_request', /'n' above 1 cannot be combined with 'session'/],
    [{ n: 2, parallel: { mode: 'fanout', segments: ['a', 'b'] } }, 'bad_request', /cannot be combined with 'parallel'/]]) {
    c.send({ type: 'chat', id: 'bad', messages: msgs, ...extra });
    const [e] = await c.collect('bad');
    assert.equal(e.type, 'error', JSON.stringify(extra));
    assert.equal(e.code, code, JSON.stringify(e));
    assert.match(e.message, re);
  }
  c.close();
});
