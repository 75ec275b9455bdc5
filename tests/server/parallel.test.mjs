// Fan-out ("parallel": {"mode":"fanout","segments":[...]}, docs/protocol.md): each segment is a
// branch whose prompt is the shared messages plus the segment; branches run in the same
// forwards and share the prompt's KV pages through the engine's prefix cache.
//   - every branch's output equals the same prompt run alone, token for token;
//   - the shared prefix is taken from the cache, not computed again (cached_tokens, metrics);
//   - max_branches bounds the branches running at once, and a fan-out runs no more than its
//     share of --max-seqs when other chats are live; cancel and disconnect end them all and
//     every page comes back; bad "parallel" values are refused with a message.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, metrics, until, require, stepUntil } from './lib.mjs';

const server = await startServer(['--max-seqs', '8'], { hold: true });
await server.release(); // the first test steps it
after(async () => assert.equal(await server.stop(), 0));

const SEQ = { policy: 'sequential', pipeline: true };
const SYSTEM = 'You are the help desk of an online shop. Keep answers short and copy order numbers exactly.';
const SEGMENTS = ['Where is my order 48213?', 'What are your store hours on Sunday?',
  'Can I return a blender?', 'My kettle arrived damaged.'];

async function run(c, id, frame) {
  c.send({ type: 'chat', id, ...frame });
  return c.collect(id, 60000);
}

function bySegment(frames) {
  const out = {};
  for (const f of frames) {
    if (f.type === 'commit') out[f.segment] = (out[f.segment] ?? '') + f.text;
  }
  return out;
}

test('fan-out: every branch equals its prompt run alone; the shared prefix is computed once', async () => {
  const c = await connect(server);
  const m0 = await metrics(server);
  const shared0 = m0.get('fogline_prefix_cache_tokens_total');
  // sequential unmasking: several steps per block, so every segment sends drafts before its
  // commits (with the threshold policy the built-in model often fills a block in one step);
  // one forward at a time, each forward's frames in before the next, so that no draft is
  // superseded by its commit because the loop ran late
  await server.hold();
  c.send({ type: 'chat', id: 'f1', messages: [{ role: 'system', content: SYSTEM }], max_tokens: 40,
    decoding: SEQ, parallel: { mode: 'fanout', segments: SEGMENTS } });
  await server.waitLog(/event=submitted req="f1"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'f1' && (f.type === 'done' || f.type === 'error')));
  await server.release();
  const frames = await c.collect('f1', 60000);
  const done = frames[frames.length - 1];
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.equal(done.finish, 'stop');
  assert.equal(done.segments.length, SEGMENTS.length);
  const segDone = frames.filter((f) => f.type === 'segment_done');
  assert.equal(segDone.length, SEGMENTS.length);
  // commits of one segment come in block order
  for (let i = 0; i < SEGMENTS.length; i++) {
    const blocks = frames.filter((f) => f.type === 'commit' && f.segment === i).map((f) => f.block);
    assert.deepEqual(blocks, blocks.slice().sort((a, b) => a - b));
    assert.ok(frames.some((f) => f.type === 'draft' && f.segment === i), `drafts for segment ${i}`);
  }
  // branches share the system prompt's whole blocks: all but one took them from the cache
  const cached = done.segments.map((s) => s.usage.cached_tokens);
  assert.ok(cached.filter((x) => x > 0).length >= SEGMENTS.length - 1, `cached ${cached}`);
  const m1 = await metrics(server);
  assert.equal(m1.get('fogline_prefix_cache_tokens_total') - shared0, cached.reduce((a, b) => a + b, 0));
  assert.equal(done.usage.prompt_tokens, done.segments.reduce((a, s) => a + s.usage.prompt_tokens, 0));
  const texts = bySegment(frames);
  // each branch alone, on another connection, one after another
  const c2 = await connect(server);
  for (let i = 0; i < SEGMENTS.length; i++) {
    const alone = await run(c2, `a${i}`, { messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: SEGMENTS[i] }], max_tokens: 40, decoding: SEQ });
    const d = alone[alone.length - 1];
    assert.equal(d.type, 'done');
    assert.equal(alone.filter((f) => f.type === 'commit').map((f) => f.text).join(''), texts[i] ?? '', `segment ${i}`);
    assert.equal(d.usage.completion_tokens, done.segments[i].usage.completion_tokens);
    assert.equal(d.usage.prompt_tokens, done.segments[i].usage.prompt_tokens);
  }
  c.close();
  c2.close();
  await until(async () => (await metrics(server)).get('fogline_kv_pages', { state: 'used' }) === 0, 10000, 'pages back');
});

test('max_branches bounds the branches at once; without messages each segment is the prompt', async () => {
  const c = await connect(server);
  const frames = await run(c, 'mb', { max_tokens: 24, parallel: { mode: 'fanout', segments: SEGMENTS.slice(0, 3), max_branches: 1 } });
  const done = frames[frames.length - 1];
  assert.equal(done.type, 'done');
  // one at a time: a segment's first frame comes after the previous segment's segment_done
  const firstOf = (i) => frames.findIndex((f) => f.segment === i);
  const endOf = (i) => frames.findIndex((f) => f.type === 'segment_done' && f.segment === i);
  assert.ok(firstOf(1) > endOf(0) && firstOf(2) > endOf(1), 'sequential branches');
  const alone = await run(c, 'mb-alone', { messages: [{ role: 'user', content: SEGMENTS[1] }], max_tokens: 24 });
  assert.equal(alone.filter((f) => f.type === 'commit').map((f) => f.text).join(''), bySegment(frames)[1] ?? '');
  c.close();
});

test('a wide fan-out leaves other sessions their share of the engine (--max-seqs)', async () => {
  // 2 sequences at once: a fan-out of 8 alone runs 2 branches; once another chat arrives each
  // gets one, so that chat does not wait behind the 6 queued branches.
  const small = await startServer(['--max-seqs', '2']);
  try {
    const a = await connect(small);
    const b = await connect(small);
    const slow = { max_tokens: 48, decoding: { policy: 'sequential', pipeline: false } };
    const segs = Array.from({ length: 8 }, (_, i) => SEGMENTS[i % SEGMENTS.length]);
    a.send({ type: 'chat', id: 'wide', messages: [{ role: 'system', content: SYSTEM }], ...slow,
      parallel: { mode: 'fanout', segments: segs } });
    await a.next((f) => f.id === 'wide' && f.type === 'draft', 30000);
    const ended = () => a.frames.filter((f) => f.id === 'wide' && f.type === 'segment_done').length;
    const before = ended();
    const other = await run(b, 'other', { messages: [{ role: 'user', content: 'Where is my order 48213?' }], ...slow });
    assert.equal(other[other.length - 1].type, 'done');
    const during = ended() - before;
    // without a share it would start after 6 branches ended; with one, after the first
    assert.ok(during <= 3, `the other chat waited for ${during} branches to end`);
    const frames = await a.collect('wide', 60000);
    const done = frames[frames.length - 1];
    assert.equal(done.type, 'done');
    assert.equal(done.segments.length, 8);
    assert.ok(done.segments.every((x) => x && x.finish !== 'error'), JSON.stringify(done.segments));
    a.close();
    b.close();
  } finally {
    assert.equal(await small.stop(), 0);
  }
});

test('cancel and disconnect end every branch; pages come back', async () => {
  const c = await connect(server);
  const long = { messages: [{ role: 'system', content: SYSTEM }], max_tokens: 200,
    decoding: { policy: 'sequential', pipeline: false }, parallel: { mode: 'fanout', segments: SEGMENTS, max_branches: 2 } };
  // held (one forward run: branches admitted) until the cancel has ended them: they cannot
  // finish first
  await server.hold();
  c.send({ type: 'chat', id: 'x', ...long });
  await server.waitLog(/event=submitted req="x"/);
  await server.step();
  c.send({ type: 'cancel', id: 'x' });
  const frames = await c.collect('x', 30000);
  await server.release();
  const done = frames[frames.length - 1];
  assert.equal(done.type, 'done');
  assert.equal(done.finish, 'cancelled');
  assert.equal(done.segments.length, SEGMENTS.length);
  assert.ok(done.segments.every((s) => s !== null));
  // the id is free again
  const again = await run(c, 'x', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
  assert.equal(again[again.length - 1].type, 'done');
  // a client that goes away mid fan-out
  const d = await connect(server);
  await server.hold();
  d.send({ type: 'chat', id: 'y', ...long });
  await server.waitLog(/event=submitted req="y"/);
  await server.step();
  d.ws.terminate();
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_kv_pages', { state: 'used' }) === 0;
  }, 20000, 'branches of a gone client to end');
  await server.release();
  c.close();
});

test('bad "parallel" values are refused with a message naming the field', async () => {
  const c = await connect(server);
  const cases = [
    [{ parallel: 'yes' }, /'parallel' must be an object/],
    [{ parallel: { mode: 'skeleton', segments: ['a'] } }, /'parallel.segments' is for mode fanout/],
    [{ parallel: { mode: 'auto', max_branches: 99 } }, /max_branches/],
    [{ parallel: { mode: 'telepathy', segments: ['a'] } }, /unknown 'parallel.mode'/],
    [{ parallel: { segments: ['a'] } }, /'parallel.mode' must be a string/],
    [{ parallel: { mode: 'fanout', segments: [] } }, /non-empty array/],
    [{ parallel: { mode: 'fanout', segments: ['a', 7] } }, /segments\[1\] must be a non-empty string/],
    [{ parallel: { mode: 'fanout', segments: Array(17).fill('q') } }, /at most 16 segments/],
    [{ parallel: { mode: 'fanout', segments: ['a'], max_branches: 0 } }, /max_branches/],
    [{ parallel: { mode: 'fanout', segments: ['a'], max_branches: 17 } }, /max_branches/],
    [{ parallel: { mode: 'fanout', segments: ['a'], fast: true } }, /unknown field 'parallel.fast'/],
    [{ parallel: { mode: 'fanout', segments: ['a'] }, session: 's' }, /cannot be combined/],
    [{ parallel: { mode: 'skeleton' }, messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }] }, /must be the user's/],
  ];
  let n = 0;
  for (const [extra, re] of cases) {
    const id = `bad${n++}`;
    c.send({ type: 'chat', id, messages: [{ role: 'user', content: 'hi' }], ...extra });
    const f = await c.next((x) => x.id === id);
    assert.equal(f.type, 'error', JSON.stringify(f));
    assert.match(f.message, re);
  }
  // the OpenAI endpoint checks the same field
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'b' }], parallel: { mode: 'auto' } }),
  });
  assert.equal(res.status, 400);
  const e = (await res.json()).error;
  assert.equal(e.param, 'parallel');
  assert.match(e.message, /must be the user's/);
  c.close();
});

test('the OpenAI endpoint: one choice per segment, streamed by index with the official client', async () => {
  const OpenAI = require('openai').default ?? require('openai');
  const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const body = { model: 'fogline', messages: [{ role: 'system', content: SYSTEM }], max_tokens: 40,
    parallel: { mode: 'fanout', segments: SEGMENTS.slice(0, 3) } };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices.length, 3);
  // each choice equals that prompt alone on the same endpoint
  for (let i = 0; i < 3; i++) {
    assert.equal(r.choices[i].index, i);
    const alone = await client.chat.completions.create({ model: 'fogline', max_tokens: 40,
      messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: SEGMENTS[i] }] });
    assert.equal(r.choices[i].message.content, alone.choices[0].message.content, `choice ${i}`);
    assert.equal(r.choices[i].finish_reason, alone.choices[0].finish_reason);
  }
  assert.ok(r.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(r.usage));
  // streaming: chunks carry their choice's index; the texts add up to the same answers
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const text = ['', '', ''];
  const finish = [null, null, null];
  const roles = [[], [], []]; // each choice's roles, in order: 'assistant' first, then none
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      roles[c.index].push(c.delta?.role ?? null);
      text[c.index] += c.delta?.content ?? '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 3; i++) {
    assert.equal(roles[i][0], 'assistant', `choice ${i}'s first chunk says its role`);
    assert.equal(roles[i].filter((x) => x).length, 1, `choice ${i}: ${roles[i]}`);
    assert.equal(text[i], r.choices[i].message.content, `streamed choice ${i}`);
    assert.equal(finish[i], r.choices[i].finish_reason);
  }
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  // a client that goes away mid-stream ends every branch
  const ac = new AbortController();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ ...body, stream: true, max_tokens: 200, decoding: { policy: 'sequential', pipeline: false } }),
  });
  const rd = res.body.getReader();
  await rd.read();
  ac.abort();
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_kv_pages', { state: 'used' }) === 0;
  }, 20000, 'branches of a gone HTTP client to end');
});

test('skeleton and auto: the model is asked for an outline; without a usable one the reply is decoded plainly', async () => {
  const c = await connect(server);
  const msgs = [{ role: 'user', content: 'Where is my order 48213? Also, what are your store hours on Sunday?' }];
  const plain = await run(c, 'plain', { messages: msgs, max_tokens: 48 });
  const plainText = plain.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  for (const mode of ['skeleton', 'auto']) {
    const frames = await run(c, `sk-${mode}`, { messages: msgs, max_tokens: 48, parallel: { mode } });
    const outline = frames.find((f) => f.type === 'outline');
    assert.ok(outline, 'an outline frame');
    const done = frames[frames.length - 1];
    assert.equal(done.type, 'done', JSON.stringify(done));
    assert.equal(done.outline_points, outline.points.length);
    // no frame of the outline stage itself reaches the client: every draft/commit has a segment
    assert.ok(frames.filter((f) => f.type === 'draft' || f.type === 'commit').every((f) => Number.isInteger(f.segment)));
    if (outline.points.length === 0) {
      // not an outline (the built-in model has not learned them): one plain branch, the plain reply
      assert.ok(outline.fallback, 'a reason');
      assert.equal(done.segments.length, 1);
      assert.equal(frames.filter((f) => f.type === 'commit').map((f) => f.text).join(''), plainText);
    } else {
      assert.ok(outline.points.length >= 2 && outline.points.length <= 10);
      assert.equal(done.segments.length, outline.points.length);
      // each point is a branch: the earlier turns (none here) plus the point as the user message
      const segs = bySegment(frames);
      for (let i = 0; i < outline.points.length; i++) {
        const alone = await run(c, `pt-${mode}-${i}`, { messages: [{ role: 'user', content: outline.points[i] }], max_tokens: 48 });
        assert.equal(segs[i] ?? '', alone.filter((f) => f.type === 'commit').map((f) => f.text).join(''), `point ${i}`);
      }
    }
  }
  // cancelled while the outline is being written: done(cancelled), nothing left running
  c.send({ type: 'chat', id: 'skc', messages: msgs, max_tokens: 200, decoding: { policy: 'sequential', pipeline: false }, parallel: { mode: 'skeleton' } });
  c.send({ type: 'cancel', id: 'skc' });
  const fr = await c.collect('skc', 30000);
  assert.equal(fr[fr.length - 1].type, 'done');
  assert.equal(fr[fr.length - 1].finish, 'cancelled');
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_kv_pages', { state: 'used' }) === 0;
  }, 20000, 'nothing left after a cancelled skeleton');
  c.close();
});

test('skeleton and auto on the OpenAI endpoint: one choice, the segments joined in order, streamed in order', async () => {
  const OpenAI = require('openai').default ?? require('openai');
  const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const msgs = [{ role: 'user', content: 'Where is my order 48213? Also, what are your store hours on Sunday?' }];
  const c = await connect(server);
  for (const mode of ['skeleton', 'auto']) {
    // the same request over the WebSocket: its segments, joined with a space, are the answer
    const frames = await run(c, `ws-${mode}`, { messages: msgs, max_tokens: 48, parallel: { mode } });
    const outline = frames.find((f) => f.type === 'outline');
    const segs = bySegment(frames);
    const n = frames[frames.length - 1].segments.length;
    const want = Array.from({ length: n }, (_, i) => segs[i] ?? '').filter((t) => t).join(' ');
    const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, max_tokens: 48, parallel: { mode } });
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.content, want);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.fogline.outline_points, outline.points.length);
    assert.equal(r.fogline.segments, n);
    const stream = await client.chat.completions.create({ model: 'fogline', messages: msgs, max_tokens: 48,
      parallel: { mode }, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    let roles = 0;
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      for (const x of ch.choices) {
        assert.equal(x.index, 0);
        if (x.delta?.role) roles++;
        text += x.delta?.content ?? '';
        if (x.finish_reason) finish = x.finish_reason;
      }
    }
    assert.equal(roles, 1, `one choice, one role chunk (${mode})`);
    assert.equal(text, want, `streamed ${mode}`);
    assert.equal(finish, 'stop');
    assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  }
  c.close();
});
