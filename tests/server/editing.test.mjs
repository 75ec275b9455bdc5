// Token editing (LLaDA2.1's decoding: decoding.edit_threshold, max_post_steps, presets) over a
// real `fogline serve` with a random dense model that edits (make_edit_model.py, FL_EDIT_MODEL):
// the options and their sources in hello and /v1/models, drafts whose `new` and `edited` lists
// say what changed since the client's previous draft of the block, commits only after a block's
// last edit, OpenAI streaming that carries committed text only, and the options' errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, user, stepUntil } from './lib.mjs';

const MODEL = process.env.FL_EDIT_MODEL;
let server;

before(async () => {
  if (!MODEL) throw new Error('FL_EDIT_MODEL is not set');
  server = await startServer(['--max-tokens-limit', '256'], { model: MODEL, hold: true });
  await server.release();
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, `the server exits 0 on SIGTERM\n${server.log()}`);
});

const QUALITY = { preset: 'quality' }; // threshold 0.7, edit_threshold 0.5, max_post_steps 16

// Checks one request's frames against the protocol's rules for drafts and commits, and returns
// how many positions the drafts marked edited. Each draft is compared with the previous draft of
// its block that this client got (none: all masked): `new` must be exactly the positions masked
// there and decided now, `edited` some of those decided there and now, and a text that changed
// must have a changed position at or before it.
function checkDrafts(frames) {
  const seen = new Map(); // block -> its tokens as last drafted
  const committed = new Set();
  let edited = 0;
  let nextBlock = 0;
  for (const f of frames) {
    if (f.type === 'draft') {
      assert.ok(!committed.has(f.block), `no draft of block ${f.block} after its commit`);
      const prev = seen.get(f.block) || f.tokens.map(() => ({ mask: true }));
      assert.equal(prev.length, f.tokens.length, 'a block keeps its length');
      const wantNew = f.tokens.flatMap((t, i) => (!t.mask && prev[i].mask ? [i] : []));
      assert.deepEqual(f.new, wantNew, `block ${f.block} step ${f.step}: new`);
      assert.ok(Array.isArray(f.edited), 'every draft has an edited list');
      for (const i of f.edited)
        assert.ok(!prev[i].mask && !f.tokens[i].mask, `edited ${i}: decided before and after`);
      // a token's text may also change with an earlier one's (a character split over
      // tokens shows on the one that completes it): some position up to it changed
      const changed = [...f.new, ...f.edited];
      f.tokens.forEach((t, i) => {
        if (!t.mask && !prev[i].mask && t.t !== prev[i].t)
          assert.ok(changed.some((j) => j <= i), `block ${f.block} step ${f.step}: ${i} changed text, nothing marked up to it`);
        if (!prev[i].mask) assert.ok(!t.mask, `block ${f.block}: a decided position is never masked again`);
      });
      edited += f.edited.length;
      seen.set(f.block, f.tokens);
    } else if (f.type === 'commit') {
      assert.equal(f.block, nextBlock++, 'commits in block order');
      committed.add(f.block);
    }
  }
  return edited;
}

test('hello and /v1/models show the editing options and where they came from', async () => {
  const c = await connect(server);
  const d = c.hello.decoding;
  assert.equal(d.edit_threshold, false, 'editing is off unless asked for');
  assert.equal(d.max_post_steps, 16);
  assert.equal(d.steps, 0);
  assert.equal(c.hello.decoding_source.edit_threshold, 'family');
  const model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0];
  assert.deepEqual(model.decoding, d);
  c.close();
  // a server flag: the preset's fields come from the flag, an explicit flag wins over it
  const s2 = await startServer(['--preset', 'quality', '--max-post-steps', '4'], { model: MODEL });
  try {
    const c2 = await connect(s2);
    const d2 = c2.hello.decoding;
    assert.deepEqual([d2.policy, d2.threshold, d2.edit_threshold, d2.max_post_steps, d2.pipeline],
      ['threshold', 0.7, 0.5, 4, false]);
    assert.deepEqual([c2.hello.decoding_source.edit_threshold, c2.hello.decoding_source.max_post_steps,
      c2.hello.decoding_source.k], ['flag', 'flag', 'family']);
    c2.close();
  } finally {
    assert.equal(await s2.stop(), 0, s2.log());
  }
});

test('with editing, drafts mark the positions that changed, and commits come after the last edit', async () => {
  const c = await connect(server);
  // one forward at a time, each forward's frames in before the next: no draft is coalesced,
  // so every edit the engine made to a shown position reaches the client
  await server.hold();
  c.send({ type: 'chat', id: 'e1', messages: user('my printer says offline'), max_tokens: 40,
           temperature: 0, decoding: QUALITY });
  await server.waitLog(/event=submitted req="e1"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'e1' && (f.type === 'done' || f.type === 'error')));
  await server.release();
  const frames = await c.collect('e1');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  const edited = checkDrafts(frames);
  assert.ok(edited > 0, 'some draft showed an edited token');
  assert.ok(done.stats.edits >= edited, `edits ${done.stats.edits} >= the ${edited} shown`);
  assert.ok(done.stats.post_steps > 0, 'blocks took post steps');
  assert.ok(done.stats.post_steps <= done.stats.blocks * 16, 'at most max_post_steps per block');
  // a block is committed once its post steps are over: its last draft has no mask left
  const commits = frames.filter((f) => f.type === 'commit');
  assert.equal(commits.length, done.stats.blocks);
  for (const cm of commits) {
    const last = frames.findLast((f) => f.type === 'draft' && f.block === cm.block);
    assert.ok(last.tokens.every((t) => !t.mask), `block ${cm.block}'s last draft is whole`);
  }
  // the same chat with editing off takes no post step and edits nothing
  c.send({ type: 'chat', id: 'e0', messages: user('my printer says offline'), max_tokens: 40,
           temperature: 0, decoding: { ...QUALITY, edit_threshold: false } });
  const off = (await c.collect('e0')).at(-1);
  assert.equal(off.type, 'done');
  assert.deepEqual([off.stats.edits, off.stats.post_steps], [0, 0]);
  c.close();
});

test('a free-running chat keeps the draft rules (coalesced drafts included) and the reply equals a held one', async () => {
  const c = await connect(server);
  const req = { messages: user('my printer says offline'), max_tokens: 40, temperature: 0, decoding: QUALITY };
  c.send({ type: 'chat', id: 'free', ...req });
  const a = await c.collect('free');
  await server.hold(); // one forward at a time: the reference run
  c.send({ type: 'chat', id: 'held', ...req });
  await server.waitLog(/event=submitted req="held"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'held' && (f.type === 'done' || f.type === 'error')));
  await server.release();
  const b = await c.collect('held');
  checkDrafts(a);
  checkDrafts(b);
  const text = (fr) => fr.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  assert.equal(text(a), text(b), 'the same reply however the client reads');
  assert.equal(a.at(-1).stats.edits, b.at(-1).stats.edits);
  c.close();
});

// "drafts": "every_step" (watching it denoise): free-running, no draft is coalesced, so every
// edit the engine made reaches the client, each step of a block is numbered, post steps included
test('every step with editing: each step numbered, every edit shown, the same reply', async () => {
  const c = await connect(server);
  const req = { messages: user('my printer says offline'), max_tokens: 40, temperature: 0, decoding: QUALITY };
  c.send({ type: 'chat', id: 'steps', ...req, drafts: 'every_step' });
  const fr = await c.collect('steps');
  c.send({ type: 'chat', id: 'plain', ...req });
  const plain = await c.collect('plain');
  const done = fr.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  const edited = checkDrafts(fr);
  assert.ok(edited > 0, 'some step edited a token');
  assert.equal(edited, done.stats.edits, 'every edit was in a draft');
  const ds = fr.filter((f) => f.type === 'draft');
  assert.equal(ds.length, done.stats.decode_forwards, 'one draft per step (blocks one at a time)');
  const last = new Map();
  for (const d of ds) {
    assert.equal(d.step, (last.get(d.block) ?? 0) + 1, `block ${d.block}: steps without a gap`);
    last.set(d.block, d.step);
  }
  const text = (x) => x.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  assert.equal(text(fr), text(plain), 'the same reply as with the default drafts');
  assert.equal(done.stats.edits, plain.at(-1).stats.edits);
  c.close();
});

test('OpenAI streaming sends committed text only, the WebSocket\'s commits in order', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'w', messages: user('where is my order?'), max_tokens: 48, temperature: 0,
           decoding: { preset: 'speed' } });
  const frames = await c.collect('w');
  assert.equal(frames.at(-1).type, 'done');
  assert.ok(frames.at(-1).stats.edits > 0, 'the speed preset edits this model');
  const commits = frames.filter((f) => f.type === 'commit' && f.text !== '').map((f) => f.text);
  c.close();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fogline', messages: user('where is my order?'), max_tokens: 48,
                           temperature: 0, stream: true, decoding: { preset: 'speed' } }),
  });
  assert.equal(res.status, 200);
  const body = await res.text();
  const deltas = body.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content).filter((t) => t);
  assert.deepEqual(deltas, commits, 'one content delta per non-empty commit, nothing drafted');
});

test('bad editing options get their one-line errors', async () => {
  const c = await connect(server);
  const cases = [
    [{ edit_threshold: 0.5, pipeline: true }, 'out_of_range',
      'edit_threshold (token editing) works on one block at a time: it needs pipeline false'],
    [{ preset: 'fast' }, 'out_of_range', "unknown decoding.preset 'fast' (quality, speed)"],
    [{ preset: 3 }, 'bad_request', "'decoding.preset' must be a string"],
    [{ edit_threshold: 2 }, 'out_of_range', "'decoding.edit_threshold' must be in [0, 1], got 2"],
    [{ edit_threshold: 'x' }, 'bad_request', "'decoding.edit_threshold' must be a number or false"],
    [{ edit_threshold: true }, 'bad_request', "'decoding.edit_threshold' must be a number or false"],
    [{ max_post_steps: 2000 }, 'out_of_range', "'decoding.max_post_steps' must be in [0, 1024], got 2000"],
    [{ steps: -1 }, 'out_of_range', "'decoding.steps' must be in [0, 4096], got -1"],
  ];
  let n = 0;
  for (const [decoding, code, message] of cases) {
    const id = `bad${n++}`;
    c.send({ type: 'chat', id, messages: user('hi'), max_tokens: 8, decoding });
    const e = await c.next((f) => f.id === id);
    assert.equal(e.type, 'error', `${JSON.stringify(decoding)} -> ${JSON.stringify(e)}`);
    assert.deepEqual([e.code, e.message], [code, message], JSON.stringify(decoding));
  }
  c.close();
});
