// "drafts": "every_step" (docs/protocol.md, "Watching it denoise"): every denoising step of a
// reply reaches the client as its own draft, none coalesced: numbered by step within its block
// without gaps, in order, each listing the positions that step unmasked, the lists adding up to
// the block; the reply is the one the default drafts give. Bad values are bad_request. (A
// client that cannot keep up: slow_steps.py.)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, user, FOUR_QUESTIONS } from './lib.mjs';

let server;
before(async () => { server = await startServer(['--threads', '1']); });
after(async () => { assert.equal(await server.stop(), 0, server.log()); });

const drafts = (fr) => fr.filter((f) => f.type === 'draft');
const commits = (fr) => fr.filter((f) => f.type === 'commit');

// Every check a step trace must pass, block by block. Returns the steps per block.
function checkSteps(fr) {
  const byBlock = new Map();
  for (const f of drafts(fr)) {
    if (!byBlock.has(f.block)) byBlock.set(f.block, []);
    byBlock.get(f.block).push(f);
  }
  const done = fr.at(-1);
  assert.equal(done.type, 'done');
  const cs = commits(fr);
  // every committed block had drafts; with pipelining, blocks after the last one may have been
  // started before the reply ended
  for (const b of byBlock.keys())
    assert.ok(cs.some((c) => c.block === b) || b > cs.at(-1).block, `block ${b}: drafted, never committed`);
  let lastMs = -1;
  for (const f of drafts(fr)) {
    assert.equal(typeof f.ms, 'number', 'an every-step draft carries the server time of its step');
    assert.ok(f.ms >= lastMs, `steps in the order the engine took them (${f.ms} after ${lastMs})`);
    lastMs = f.ms;
  }
  const steps = [];
  for (const c of cs) {
    const ds = byBlock.get(c.block);
    assert.ok(ds, `block ${c.block} had drafts`);
    // numbered from 1 without a gap (each draft is one step of its block)
    ds.forEach((d, i) => assert.equal(d.step, i + 1, `block ${c.block}: draft ${i} is step ${i + 1}, got ${d.step}`));
    // each step's "new" positions were masked before it and are decided now; nothing else
    // changes (no token editing here)
    let prev = ds[0].tokens.map(() => ({ mask: true }));
    let unmasked = 0;
    for (const d of ds) {
      assert.equal(d.tokens.length, prev.length, 'a block keeps its width');
      assert.deepEqual(d.edited, []);
      const nw = new Set(d.new);
      d.tokens.forEach((t, i) => {
        if (nw.has(i)) {
          assert.ok(prev[i].mask && !t.mask, `block ${c.block} step ${d.step}: position ${i} new`);
        } else {
          assert.deepEqual(t, prev[i], `block ${c.block} step ${d.step}: position ${i} unchanged`);
        }
      });
      unmasked += nw.size;
      prev = d.tokens;
    }
    // the counts add up: every decided position of the block was unmasked in exactly one step
    assert.equal(unmasked, prev.filter((t) => !t.mask).length, `block ${c.block}: the steps' new positions add up`);
    // and the last draft is the committed block; only the reply's last block may keep masks,
    // after its end token (the first, with no mask before it)
    const last = c.block === cs.at(-1).block && done.finish === 'stop';
    const head = last && prev.some((t) => t.mask) ? prev.slice(0, prev.findIndex((t) => t.mask)) : prev;
    assert.ok(last || prev.every((t) => !t.mask), `block ${c.block}: its last draft has no mask`);
    const text = head.map((t) => t.t).join('');
    if (!last) assert.equal(text, c.text);
    else assert.ok(text.startsWith(c.text), `block ${c.block}: ${JSON.stringify(text)} begins with the commit`);
    steps.push(ds.length);
  }
  return steps;
}

test('every step, one block at a time: steps 1..S per block, new positions add up, one step per forward', async () => {
  const c = await connect(server);
  const decoding = { policy: 'threshold', pipeline: false };
  c.send({ type: 'chat', id: 'e1', messages: user(FOUR_QUESTIONS), max_tokens: 96, decoding, drafts: 'every_step' });
  const fr = await c.collect('e1');
  const steps = checkSteps(fr);
  const done = fr.at(-1);
  // without pipelining each decoding forward denoises exactly one block: one step
  assert.equal(steps.reduce((a, b) => a + b, 0), done.stats.decode_forwards);
  assert.ok(steps.some((s) => s > 1), 'some block took several steps');
  // the same reply as with the default drafts: asking for every step changes nothing else
  c.send({ type: 'chat', id: 'l1', messages: user(FOUR_QUESTIONS), max_tokens: 96, decoding, drafts: 'latest' });
  const fl = await c.collect('l1');
  assert.equal(commits(fl).map((f) => f.text).join(''), commits(fr).map((f) => f.text).join(''));
  assert.ok(drafts(fl).every((f) => f.ms === undefined), 'default drafts are as before (no ms)');
  c.close();
});

test('every step with pipelining: blocks interleave, each still numbered without gaps', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'p1', messages: user(FOUR_QUESTIONS), max_tokens: 96,
           decoding: { pipeline: true, max_blocks: 3, policy: 'sequential' }, drafts: 'every_step' });
  const fr = await c.collect('p1');
  const steps = checkSteps(fr);
  const done = fr.at(-1);
  // a forward may denoise two or three blocks: at least one step per decoding forward (the
  // committed blocks' steps; blocks started past the end add more)
  assert.ok(steps.reduce((a, b) => a + b, 0) >= done.stats.decode_forwards);
  const ds = drafts(fr);
  // interleaved: some draft of a later block came before the last draft of an earlier one
  const lastOf = new Map();
  ds.forEach((d, i) => lastOf.set(d.block, i));
  assert.ok(ds.some((d, i) => d.block > 0 && i < lastOf.get(d.block - 1)), 'blocks were denoised together');
  c.close();
});

test('a fan-out asks for every step of each branch', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'f1', parallel: { mode: 'fanout', segments: ['Where is my order 48213?', 'What are your store hours?'] },
           max_tokens: 48, decoding: { pipeline: false }, drafts: 'every_step' });
  const fr = await c.collect('f1');
  for (const seg of [0, 1]) {
    const mine = fr.filter((f) => f.segment === seg && (f.type === 'draft' || f.type === 'commit'));
    const end = fr.find((f) => f.type === 'segment_done' && f.segment === seg);
    assert.ok(end, `segment ${seg} ended`);
    const steps = checkSteps([...mine, { ...end, type: 'done' }]);
    assert.equal(steps.reduce((a, b) => a + b, 0), end.stats.decode_forwards);
  }
  c.close();
});

test('bad values of drafts are bad_request and name the field', async () => {
  const c = await connect(server);
  for (const [i, v] of [['b1', 'all'], ['b2', 1], ['b3', true], ['b4', ['every_step']]]) {
    c.send({ type: 'chat', id: i, messages: user('hi'), drafts: v });
    const f = await c.next((x) => x.id === i);
    assert.equal(f.type, 'error');
    assert.equal(f.code, 'bad_request');
    assert.match(f.message, /'drafts' must be "latest" .* or "every_step"/);
  }
  // null is the default
  c.send({ type: 'chat', id: 'n1', messages: user('hi'), max_tokens: 8, drafts: null });
  assert.equal((await c.collect('n1')).at(-1).type, 'done');
  c.close();
});

// A client too slow for every step: tests/server/slow_steps.py (a socket whose buffers it sized).
