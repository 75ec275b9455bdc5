// logprobs and top_logprobs on /v1/chat/completions, and the legacy logprobs of
// /v1/completions (docs/protocol.md), with the official `openai` client. The values themselves are checked against the PyTorch reference by
// decode.parity_logprobs (the engine's trace replayed); here, that the server hands on the
// engine's: the same numbers as `fogline generate --json --logprobs` for the same prompt; one
// entry per reply token, their texts adding up to the reply; streamed chunks carrying their
// commit's tokens, adding up to the plain answer; a stop string keeping the tokens whose text
// starts before the cut; n choices each the lone request's with its seed; the legacy shape
// (tokens, token_logprobs, top_logprobs, text_offset) with the chat's numbers; the WebSocket
// chat's commits carrying their tokens'; bad inputs on both.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startServer, connect, require, BIN, MODEL } from './lib.mjs';

const OpenAI = require('openai').default;
const DIR = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
const Q = 'Where is my order 48213? How long does express shipping take?';
const SAMPLED = [{ role: 'user', content: 'what can you do' }]; // replies that vary when sampled
const msgs = [{ role: 'user', content: Q }];

let server;
let client;
before(async () => {
  server = await startServer(['--max-tokens', '48']);
  client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

const texts = (content) => content.map((t) => t.token).join('');

function checkEntry(e, k, what) {
  assert.equal(typeof e.token, 'string', what);
  assert.ok(Number.isFinite(e.logprob) && e.logprob <= 0, `${what}: ${e.logprob}`);
  assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')], `${what}: bytes of ${JSON.stringify(e.token)}`);
  assert.equal(e.top_logprobs.length, k, what);
  for (let j = 1; j < k; j++) assert.ok(e.top_logprobs[j - 1].logprob >= e.top_logprobs[j].logprob, what);
}

test('greedy: one entry per reply token, as `fogline generate --logprobs` gives them', async () => {
  const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    logprobs: true, top_logprobs: 3 });
  const c = r.choices[0];
  const content = c.logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(texts(content), c.message.content);
  content.forEach((e, i) => {
    checkEntry(e, 3, `token ${i}`);
    // greedy: the chosen token is the most likely one
    assert.equal(e.top_logprobs[0].token, e.token, `token ${i}`);
    assert.equal(e.top_logprobs[0].logprob, e.logprob, `token ${i}`);
  });
  const cli = spawnSync(BIN, ['generate', '--model', DIR, '--json', '--prompt', Q, '--max-tokens', '48',
    '--temperature', '0', '--logprobs', '3', '--threads', '2'], { encoding: 'utf8' });
  assert.equal(cli.status, 0, cli.stderr);
  const want = JSON.parse(cli.stdout);
  assert.equal(want.text, c.message.content);
  assert.equal(want.logprobs.length, content.length);
  want.logprobs.forEach((w, i) => {
    assert.ok(Math.abs(w.logprob - content[i].logprob) < 1e-5, `token ${i}: ${w.logprob} vs ${content[i].logprob}`);
    assert.deepEqual(w.top.map(([, lp]) => Math.round(lp * 1e4)),
      content[i].top_logprobs.map((t) => Math.round(t.logprob * 1e4)), `token ${i}`);
  });
  // without logprobs the field is null, and the reply the same
  const plain = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0 });
  assert.equal(plain.choices[0].logprobs, null);
  assert.equal(plain.choices[0].message.content, c.message.content);
  // top_logprobs 0 (or left out): the chosen tokens only
  const bare = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    logprobs: true });
  assert.deepEqual(bare.choices[0].logprobs.content.map((e) => [e.token, e.logprob, e.top_logprobs.length]),
    content.map((e) => [e.token, e.logprob, 0]));
});

test('streamed: each chunk carries its commit\'s tokens; together the plain answer\'s', async () => {
  const body = { model: 'fogline', messages: msgs, temperature: 0, logprobs: true, top_logprobs: 2 };
  const plain = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const got = [];
  let text = '';
  for await (const ch of stream) {
    for (const c of ch.choices) {
      text += c.delta?.content ?? '';
      const lp = c.logprobs?.content ?? [];
      // a chunk's tokens are its own text
      if (lp.length && c.delta?.content !== undefined) assert.equal(texts(lp), c.delta.content);
      got.push(...lp);
    }
  }
  assert.equal(text, plain.choices[0].message.content);
  assert.deepEqual(got, plain.choices[0].logprobs.content);
});

test('a stop string: the tokens whose text starts before the cut', async () => {
  const plain = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    logprobs: true });
  const full = plain.choices[0].message.content;
  const all = plain.choices[0].logprobs.content;
  // cut inside the reply, at a word of its second half
  const words = full.split(' ');
  const stop = ' ' + words[Math.floor(words.length / 2)];
  const cut = full.slice(0, full.indexOf(stop));
  assert.ok(cut.length > 0 && cut.length < full.length, `test data: ${JSON.stringify(stop)} cuts ${JSON.stringify(full)}`);
  for (const stream of [false, true]) {
    const body = { model: 'fogline', messages: msgs, temperature: 0, logprobs: true, stop: [stop] };
    let content;
    let lp = [];
    if (stream) {
      content = '';
      for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
        for (const c of ch.choices) {
          content += c.delta?.content ?? '';
          lp.push(...(c.logprobs?.content ?? []));
        }
    } else {
      const r = await client.chat.completions.create(body);
      content = r.choices[0].message.content;
      lp = r.choices[0].logprobs.content;
    }
    assert.equal(content, cut, `stream ${stream}`);
    assert.ok(texts(lp).startsWith(cut), `stream ${stream}: ${JSON.stringify(texts(lp))}`);
    assert.ok(texts(lp.slice(0, -1)).length < cut.length, `stream ${stream}: one token too many`);
    assert.deepEqual(lp, all.slice(0, lp.length), `stream ${stream}`);
  }
});

test('n choices: each the lone request\'s log probabilities with its seed', async () => {
  const body = { model: 'fogline', messages: SAMPLED, max_tokens: 32, temperature: 1.2, seed: 11,
    logprobs: true, top_logprobs: 1 };
  const many = await client.chat.completions.create({ ...body, n: 3 });
  const seen = new Set();
  for (const c of many.choices) {
    const one = await client.chat.completions.create({ ...body, seed: 11 + c.index });
    assert.equal(c.message.content, one.choices[0].message.content, `choice ${c.index}`);
    assert.deepEqual(c.logprobs, one.choices[0].logprobs, `choice ${c.index}`);
    assert.equal(c.logprobs.content.length > 0, true);
    seen.add(c.message.content);
    // sampled: the chosen token need not be the most likely, its logprob is still its own
    for (const e of c.logprobs.content) checkEntry(e, 1, `choice ${c.index}`);
  }
  assert.ok(seen.size > 1, 'test data: the samples differ');
  // streamed, by index
  const lp = [[], [], []];
  for await (const ch of await client.chat.completions.create({ ...body, n: 3, stream: true }))
    for (const c of ch.choices) lp[c.index].push(...(c.logprobs?.content ?? []));
  many.choices.forEach((c) => assert.deepEqual(lp[c.index], c.logprobs.content, `streamed choice ${c.index}`));
});

test('bad inputs: 400s naming the field', async () => {
  const post = async (body) => {
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: msgs, ...body }) });
    return { status: res.status, json: await res.json() };
  };
  for (const [body, code, param, re] of [
    [{ logprobs: 'yes' }, 'bad_request', 'logprobs', /true or false/],
    [{ logprobs: 1 }, 'bad_request', 'logprobs', /true or false/],
    [{ logprobs: true, top_logprobs: 21 }, 'out_of_range', 'top_logprobs', /\[0, 20\], got 21/],
    [{ logprobs: true, top_logprobs: -1 }, 'out_of_range', 'top_logprobs', /\[0, 20\], got -1/],
    [{ logprobs: true, top_logprobs: 1.5 }, 'bad_request', 'top_logprobs', /integer/],
    [{ top_logprobs: 2 }, 'bad_request', 'top_logprobs', /needs 'logprobs': true/],
    [{ logprobs: false, top_logprobs: 2 }, 'bad_request', 'top_logprobs', /needs 'logprobs': true/],
    [{ logprobs: true, parallel: { mode: 'fanout', segments: ['a', 'b'] } }, 'bad_request', 'logprobs', /cannot be combined with 'parallel'/],
  ]) {
    const r = await post(body);
    const what = JSON.stringify(body);
    assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error.code, code, what);
    assert.equal(r.json.error.param, param, what);
    assert.match(r.json.error.message, re, what);
  }
  // logprobs false, null or absent, top_logprobs null: plain answers
  for (const body of [{ logprobs: false }, { logprobs: null }, { logprobs: true, top_logprobs: null }]) {
    const r = await post({ ...body, max_tokens: 4 });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.choices[0].logprobs === null, body.logprobs !== true, JSON.stringify(body));
  }
});

test('/v1/completions: the legacy shape, the same numbers as the chat for the rendered prompt', async () => {
  const chat = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const want = chat.choices[0].logprobs.content;
  const tk = await (await fetch(`${server.url}/tokenize`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: msgs }) })).json();
  const body = { model: 'fogline', prompt: tk.prompt, temperature: 0, logprobs: 2 };
  const r = await client.completions.create(body);
  const c = r.choices[0];
  assert.equal(c.text, chat.choices[0].message.content);
  const lp = c.logprobs;
  assert.deepEqual(lp.tokens, want.map((e) => e.token));
  assert.deepEqual(lp.token_logprobs, want.map((e) => e.logprob));
  // each token's alternatives, and itself
  lp.top_logprobs.forEach((top, i) => {
    const alts = Object.fromEntries(want[i].top_logprobs.map((a) => [a.token, a.logprob]));
    assert.deepEqual(top, { ...alts, [want[i].token]: want[i].logprob }, `token ${i}`);
  });
  // text_offset: where each token's text starts in the completion
  let at = 0;
  lp.tokens.forEach((t, i) => {
    assert.equal(lp.text_offset[i], at, `token ${i}`);
    assert.ok(c.text.slice(at).startsWith(t), `token ${i}`);
    at += [...t].length;
  });
  // streamed: the same lists, the offsets going on across chunks
  const all = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of await client.completions.create({ ...body, stream: true }))
    for (const x of ch.choices)
      for (const k of Object.keys(all)) all[k].push(...(x.logprobs?.[k] ?? []));
  assert.deepEqual(all, lp);
  // logprobs 0: the chosen tokens only; false or null: none
  const zero = await client.completions.create({ ...body, logprobs: 0 });
  assert.deepEqual(zero.choices[0].logprobs.top_logprobs, want.map((e) => ({ [e.token]: e.logprob })));
  for (const off of [false, null]) {
    const none = await client.completions.create({ ...body, logprobs: off });
    assert.equal(none.choices[0].logprobs, null);
  }
  // a batch with n: every choice its own, as the prompt alone gives them
  const many = await client.completions.create({ ...body, prompt: [tk.prompt, tk.tokens], n: 2 });
  assert.equal(many.choices.length, 4);
  for (const x of many.choices) assert.deepEqual(x.logprobs, lp, `choice ${x.index}`);
});

test('the WebSocket: each commit carries its tokens\' log probabilities; bad ones are errors', async () => {
  const http = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    logprobs: true, top_logprobs: 2 });
  const c = await connect(server);
  c.send({ type: 'chat', id: 'lp', messages: msgs, temperature: 0, logprobs: true, top_logprobs: 2 });
  const frames = await c.collect('lp');
  assert.equal(frames.at(-1).type, 'done', JSON.stringify(frames.at(-1)));
  const commits = frames.filter((f) => f.type === 'commit');
  for (const f of commits) assert.equal(texts(f.logprobs), f.text, `block ${f.block}`);
  // the same values (the WebSocket writes reals with 17 digits, HTTP with 15)
  const round = (list) => list.map((e) => ({ ...e, logprob: +e.logprob.toPrecision(12),
    top_logprobs: e.top_logprobs.map((t) => ({ ...t, logprob: +t.logprob.toPrecision(12) })) }));
  assert.deepEqual(round(commits.flatMap((f) => f.logprobs)), round(http.choices[0].logprobs.content));
  // without: no field
  c.send({ type: 'chat', id: 'plain', messages: msgs, temperature: 0, max_tokens: 8 });
  for (const f of await c.collect('plain')) assert.equal(f.logprobs, undefined, f.type);
  for (const [extra, re] of [
    [{ top_logprobs: 2 }, /needs 'logprobs': true/],
    [{ logprobs: 'yes' }, /'logprobs' must be true or false/],
    [{ logprobs: true, top_logprobs: 30 }, /\[0, 20\], got 30/],
    [{ logprobs: true, parallel: { mode: 'fanout', segments: ['a'] } }, /cannot be combined with 'parallel'/],
  ]) {
    c.send({ type: 'chat', id: 'bad', messages: msgs, ...extra });
    const [e] = await c.collect('bad');
    assert.equal(e.type, 'error', JSON.stringify(e));
    assert.match(e.message, re, JSON.stringify(extra));
  }
  c.close();
});
