// A LLaDA2-format model (make_moe_model.py --family llada2: the real config keys and tensor
// names, real vocabulary; the stand-in Ling tokenizer of make_ling_tokenizer.py) over a real
// `fogline serve` (FL_LLADA2_MODEL): hello and /v1/models show the family's defaults (the
// authors' LLaDA2.0 generate), a WebSocket chat with LLaDA2.1's editing shows drafts whose
// `new`/`edited` lists follow the protocol, edits, and commits after each block's last edit; the
// official openai client gets the committed text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, user, stepUntil, require } from './lib.mjs';

const OpenAI = require('openai').default;
const MODEL = process.env.FL_LLADA2_MODEL;
let server;

before(async () => {
  if (!MODEL) throw new Error('FL_LLADA2_MODEL is not set');
  server = await startServer([], { model: MODEL, hold: true });
  await server.release();
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, `the server exits 0 on SIGTERM\n${server.log()}`);
});

test('hello and /v1/models: the llada2 family and its authors\' defaults', async () => {
  const c = await connect(server);
  const d = c.hello.decoding;
  assert.deepEqual([d.policy, d.threshold, d.steps, d.edit_threshold, d.pipeline],
    ['dynamic', 0.95, 32, false, false]);
  assert.equal(c.hello.decoding_source.threshold, 'family');
  c.close();
  const model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0];
  assert.equal(model.family, 'llada2');
  assert.deepEqual(model.decoding, d);
});

test('a chat with token editing: drafts, edits, and commits after the last edit', async () => {
  const c = await connect(server);
  await server.hold(); // one forward at a time: every draft reaches the client uncoalesced
  c.send({ type: 'chat', id: 'l1', messages: user('where is my order?'), max_tokens: 40,
           temperature: 0, decoding: { preset: 'speed' } });
  await server.waitLog(/event=submitted req="l1"/);
  await stepUntil(server, c, () => c.frames.some((f) => f.id === 'l1' && (f.type === 'done' || f.type === 'error')));
  await server.release();
  const frames = await c.collect('l1');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  const seen = new Map();
  let edited = 0;
  let next = 0;
  for (const f of frames) {
    if (f.type === 'draft') {
      // LLaDA2 blocks are 32 tokens: a draft shows a block's reply positions (the first block
      // also holds the prompt's end, the last one stops at max_tokens)
      assert.ok(f.tokens.length > 0 && f.tokens.length <= 32, `block of ${f.tokens.length}`);
      const prev = seen.get(f.block) || f.tokens.map(() => ({ mask: true }));
      const wantNew = f.tokens.flatMap((t, i) => (!t.mask && prev[i].mask ? [i] : []));
      assert.deepEqual(f.new, wantNew, `block ${f.block} step ${f.step}: new`);
      for (const i of f.edited) assert.ok(!prev[i].mask && !f.tokens[i].mask, `edited ${i}`);
      edited += f.edited.length;
      seen.set(f.block, f.tokens);
    } else if (f.type === 'commit') {
      assert.equal(f.block, next++, 'commits in block order');
      const last = frames.findLast((g) => g.type === 'draft' && g.block === f.block);
      assert.ok(last.tokens.every((t) => !t.mask), `block ${f.block} is whole when committed`);
    }
  }
  assert.ok(frames.some((f) => f.type === 'draft'), 'drafts were shown');
  assert.ok(edited > 0 && done.stats.edits >= edited, `edits shown ${edited}, made ${done.stats.edits}`);
  assert.ok(done.stats.post_steps > 0, 'blocks took post steps');
  c.close();
});

test('the official openai client: a chat completion and a stream of committed text', async () => {
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused' });
  const r = await client.chat.completions.create({ model: 'fogline', messages: user('hello'),
                                                   max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 24);
  const stream = await client.chat.completions.create({ model: 'fogline', messages: user('hello'),
                                                        max_tokens: 24, temperature: 0, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, r.choices[0].message.content, 'streamed and whole replies agree');
});
