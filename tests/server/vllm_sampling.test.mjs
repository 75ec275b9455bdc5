// vLLM's sampling parameters that OpenAI-style clients send beside OpenAI's own: min_p,
// repetition_penalty, stop_token_ids and include_stop_str_in_output, on /v1/chat/completions, /v1/completions, the
// WebSocket chat and POST /generate (docs/protocol.md), with the official `openai` client.
// The engine's side is checked in the unit tests (test_decode: min_p against Hugging Face's
// definition, the repetition penalty's row against a plain rewrite) and against the PyTorch
// reference by decode.parity_logprobs (the trace replayed with the penalty); here, that every
// transport hands them on and decodes exactly as `fogline generate` with the same flags does,
// what each one means where it can be seen from outside (min_p 1 keeps only the likeliest
// token: a sampled reply is the greedy one; a stop token id ends the reply at its first
// occurrence and stays in it), and that every bad value is a 400 (an error frame) naming the
// field.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startServer, connect, require, BIN, MODEL } from './lib.mjs';

const OpenAI = require('openai').default;
const DIR = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
const VOCAB = JSON.parse(readFileSync(`${DIR}/config.json`, 'utf8')).vocab_size;
const Q = 'Where is my order 48213? How long does express shipping take?';
const msgs = [{ role: 'user', content: Q }];

let server;
let client;
let plain; // the greedy reply, from the CLI
let dot; // the token id of "."

before(async () => {
  server = await startServer(['--max-tokens', '48']);
  client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
  plain = generate();
  const t = await post('/tokenize', { prompt: '.' });
  assert.equal(t.json.tokens.length, 1, JSON.stringify(t.json));
  dot = t.json.tokens[0];
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

// `fogline generate` for the same question (greedy unless the flags say otherwise)
function generate(more = [], maxTokens = 48) {
  const r = spawnSync(BIN, ['generate', '--model', DIR, '--json', '--prompt', Q, '--max-tokens',
    String(maxTokens), '--temperature', '0', '--threads', '2', ...more], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

const post = async (path, body) => {
  const res = await fetch(`${server.url}${path}`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};

const wsText = (frames) => frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');

// the same request on every transport: chat completions (and streamed), text completions on
// the rendered prompt's ids, the WebSocket chat and /generate; each must give want's text
async function everywhere(extra, want, what) {
  const body = { model: 'fogline', messages: msgs, temperature: 0, ...extra };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices[0].message.content, want.text, `chat ${what}`);
  let text = '';
  for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
    text += ch.choices[0]?.delta?.content ?? '';
  assert.equal(text, want.text, `streamed ${what}`);
  const tk = await post('/tokenize', { messages: msgs });
  const t = await client.completions.create({ model: 'fogline', prompt: tk.json.tokens, temperature: 0,
    ...extra });
  assert.equal(t.choices[0].text, want.text, `completions ${what}`);
  const c = await connect(server);
  c.send({ type: 'chat', id: 'w', messages: msgs, temperature: 0, ...extra });
  assert.equal(wsText(await c.collect('w')), want.text, `ws ${what}`);
  c.close();
  const g = await post('/generate', { segments: [Q, Q], temperature: 0, ...extra });
  assert.equal(g.status, 200, JSON.stringify(g.json));
  assert.deepEqual(g.json.output, [want.text, want.text], `/generate ${what}`);
  return r;
}

// a bad value: 400 with the code, the param and the message, on both completions, the
// WebSocket (an error frame) and /generate
async function refused(extra, code, param, re) {
  const what = JSON.stringify(extra);
  for (const [path, b] of [['/v1/chat/completions', { messages: msgs }], ['/v1/completions', { prompt: Q }],
    ['/generate', { segments: [Q] }]]) {
    if (path !== '/v1/chat/completions' && extra.response_format) continue;
    const h = await post(path, { ...b, ...extra });
    assert.equal(h.status, 400, `${path} ${what}: ${JSON.stringify(h.json)}`);
    assert.equal(h.json.error.code, code, `${path} ${what}`);
    assert.equal(h.json.error.param, param, `${path} ${what}`);
    assert.match(h.json.error.message, re, `${path} ${what}`);
  }
  const c = await connect(server);
  c.send({ type: 'chat', id: 'bad', messages: msgs, ...extra });
  const [e] = await c.collect('bad');
  assert.equal(e.type, 'error', `ws ${what}: ${JSON.stringify(e)}`);
  assert.equal(e.code, code, `ws ${what}`);
  assert.match(e.message, re, `ws ${what}`);
  c.close();
}

test('min_p: sampled replies as `fogline generate --min-p`; min_p 1 keeps only the likeliest token', async () => {
  // a seed whose reply at temperature 2 min_p changes (the test data must show the cut)
  let seed = 0;
  let hot;
  let cut;
  for (let s = 1; s <= 40 && !seed; s++) {
    hot = generate(['--temperature', '2', '--seed', String(s)]);
    cut = generate(['--temperature', '2', '--seed', String(s), '--min-p', '0.2']);
    if (hot.text !== cut.text) seed = s;
  }
  assert.ok(seed, 'no seed in 1..40 where min_p 0.2 changes a reply at temperature 2');
  await everywhere({ temperature: 2, seed, min_p: 0.2 }, cut, 'min_p 0.2');
  // 0 is off
  const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 2, seed,
    min_p: 0 });
  assert.equal(r.choices[0].message.content, hot.text);
  // 1 keeps only the tokens as likely as the likeliest: the sampled reply is the greedy one
  assert.notEqual(hot.text, plain.text, 'test data: temperature 2 changes the reply');
  for (const s of [seed, seed + 1]) {
    const one = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 2,
      seed: s, min_p: 1 });
    assert.equal(one.choices[0].message.content, plain.text, `seed ${s}`);
  }
  // every choice of n takes it: choice i is the request alone with seed + i
  const n = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 2, seed,
    min_p: 0.2, n: 2 });
  assert.equal(n.choices[0].message.content, cut.text);
  assert.equal(n.choices[1].message.content,
    generate(['--temperature', '2', '--seed', String(seed + 1), '--min-p', '0.2']).text);
  for (const [v, code, re] of [[1.5, 'out_of_range', /'min_p' must be in \[0, 1\], got 1.5/],
    [-0.1, 'out_of_range', /'min_p' must be in \[0, 1\]/], ['0.1', 'bad_request', /'min_p' must be a number/]])
    await refused({ min_p: v }, code, 'min_p', re);
});

test('repetition_penalty: as `fogline generate --repetition-penalty`; 1 is off', async () => {
  const pen = generate(['--repetition-penalty', '1.5']);
  assert.notEqual(pen.text, plain.text, 'test data: the penalty changes the reply');
  await everywhere({ repetition_penalty: 1.5 }, pen, 'repetition_penalty 1.5');
  const lift = generate(['--repetition-penalty', '0.5', '--ignore-eos']);
  await everywhere({ repetition_penalty: 0.5, ignore_eos: true }, lift, 'repetition_penalty 0.5');
  const off = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    repetition_penalty: 1 });
  assert.equal(off.choices[0].message.content, plain.text);
  for (const [v, code, re] of [[0, 'out_of_range', /'repetition_penalty' must be in \(0, 10\], got 0/],
    [10.5, 'out_of_range', /'repetition_penalty' must be in \(0, 10\], got 10.5/],
    [-1, 'out_of_range', /repetition_penalty/], [true, 'bad_request', /'repetition_penalty' must be a number/]])
    await refused({ repetition_penalty: v }, code, 'repetition_penalty', re);
});

test('stop_token_ids: the reply ends at the first one, which stays in it; min_tokens keeps it out', async () => {
  const at = plain.ids.indexOf(dot);
  assert.ok(at > 0 && at < plain.ids.length - 2, `test data: "." inside the reply (${plain.ids})`);
  const want = generate(['--stop-token-ids', `7,${dot}`]);
  assert.deepEqual(want.ids, plain.ids.slice(0, at + 1), 'the CLI ends at the first "."');
  assert.equal(want.finish, 'stop');
  assert.ok(want.text.endsWith('.') && plain.text.startsWith(want.text), want.text);
  const r = await everywhere({ stop_token_ids: [7, dot] }, want, 'stop_token_ids');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.completion_tokens, at + 1);
  // its log probability is reported as the reply's other tokens' are
  const lp = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    stop_token_ids: [dot], logprobs: true });
  assert.equal(lp.choices[0].logprobs.content.length, at + 1);
  assert.equal(lp.choices[0].logprobs.content.at(-1).token, '.');
  // min_tokens bans it from the first positions, ignore_eos does not
  const late = generate(['--stop-token-ids', String(dot), '--min-tokens', String(at + 2)]);
  assert.ok(late.ids.indexOf(dot) >= at + 2 || !late.ids.includes(dot), JSON.stringify(late.ids));
  await everywhere({ stop_token_ids: [dot], min_tokens: at + 2 }, late, 'with min_tokens');
  const noeos = generate(['--stop-token-ids', String(dot), '--ignore-eos']);
  assert.equal(noeos.finish, 'stop');
  assert.equal(noeos.ids.at(-1), dot);
  await everywhere({ stop_token_ids: [dot], ignore_eos: true }, noeos, 'with ignore_eos');
  // [] and null are none
  for (const none of [[], null]) {
    const x = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
      stop_token_ids: none });
    assert.equal(x.choices[0].message.content, plain.text);
  }
  for (const [v, code, re] of [
    [dot, 'bad_request', /'stop_token_ids' must be an array of token ids/],
    [[1, 'x'], 'bad_request', /stop_token_ids\[1\] must be a token id \(an integer\)/],
    [[2.5], 'bad_request', /stop_token_ids\[0\] must be a token id/],
    [[VOCAB], 'out_of_range', new RegExp(`stop_token_ids\\[0\\] is ${VOCAB}, outside the vocabulary \\(${VOCAB} ids\\)`)],
    [[-1], 'out_of_range', /stop_token_ids\[0\] is -1/],
    [Array(257).fill(dot), 'out_of_range', /'stop_token_ids' names 257 tokens; at most 256/],
  ])
    await refused({ stop_token_ids: v }, code, 'stop_token_ids', re);
  await refused({ stop_token_ids: [dot], response_format: { type: 'json_object' } }, 'bad_request',
    'stop_token_ids', /'stop_token_ids' cannot be combined with 'response_format'/);
});

test('include_stop_str_in_output: the stop string that ends the reply stays at its end', async () => {
  const stop = 'shipped';
  const at = plain.text.indexOf(stop);
  assert.ok(at > 0, `test data: "${stop}" in the reply (${plain.text})`);
  const cut = generate(['--stop', stop]);
  const kept = generate(['--stop', stop, '--include-stop-str']);
  assert.equal(cut.text, plain.text.slice(0, at));
  assert.equal(kept.text, plain.text.slice(0, at + stop.length));
  assert.equal(kept.finish, 'stop');
  const r = await everywhere({ stop: [stop], include_stop_str_in_output: true }, kept, 'include_stop_str_in_output');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const off = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0,
    stop: [stop], include_stop_str_in_output: false });
  assert.equal(off.choices[0].message.content, cut.text);
  await refused({ include_stop_str_in_output: 1 }, 'bad_request', 'include_stop_str_in_output',
    /'include_stop_str_in_output' must be true or false/);
});

test('/generate takes the sampling and penalty fields of chat completions', async () => {
  const bias = { [plain.ids[0]]: -100 };
  const want = generate(['--logit-bias', `${plain.ids[0]}:-100`, '--presence-penalty', '0.5',
    '--frequency-penalty', '1', '--min-tokens', '30']);
  assert.notEqual(want.text, plain.text, 'test data: the fields change the reply');
  const g = await post('/generate', { segments: [Q], temperature: 0, logit_bias: bias, presence_penalty: 0.5,
    frequency_penalty: 1, min_tokens: 30 });
  assert.equal(g.status, 200, JSON.stringify(g.json));
  assert.deepEqual(g.json.output, [want.text]);
  const all = generate(['--ignore-eos']);
  const e = await post('/generate', { segments: [Q], temperature: 0, ignore_eos: true });
  assert.deepEqual(e.json.output, [all.text]);
  assert.equal(e.json.fogline.segments[0].finish, 'length');
  // still no logprobs there (its answer has no place for them) and no unknown field
  for (const extra of [{ logprobs: true }, { best_of: 2 }]) {
    const h = await post('/generate', { segments: [Q], ...extra });
    assert.equal(h.status, 400, JSON.stringify(extra));
    assert.match(h.json.error.message, new RegExp(`unknown field '${Object.keys(extra)[0]}' in /generate`));
  }
});

// stop_reason as each transport reports it for the same request: chat completions (and the
// streamed finish chunk), both choices of n 2, text completions, the WebSocket's done (absent
// when null) and /generate's segments (the same); `fogline generate --json` is the reference
async function reasons(extra) {
  const body = { model: 'fogline', messages: msgs, temperature: 0, ...extra };
  const out = {};
  const r = await client.chat.completions.create(body);
  out.chat = r.choices[0].stop_reason;
  out.text = r.choices[0].message.content;
  let last;
  for await (const ch of await client.chat.completions.create({ ...body, stream: true }))
    if (ch.choices[0]?.finish_reason) last = ch.choices[0];
  out.streamed = last.stop_reason;
  const n = await client.chat.completions.create({ ...body, n: 2 });
  out.n = n.choices.map((c) => c.stop_reason);
  const tk = await post('/tokenize', { messages: msgs });
  const t = await client.completions.create({ model: 'fogline', prompt: tk.json.tokens, temperature: 0, ...extra });
  out.completions = t.choices[0].stop_reason;
  const c = await connect(server);
  c.send({ type: 'chat', id: 'w', messages: msgs, temperature: 0, ...extra });
  const done = (await c.collect('w')).at(-1);
  out.ws = 'stop_reason' in done ? done.stop_reason : null;
  c.close();
  const g = await post('/generate', { segments: [Q], temperature: 0, ...extra });
  const seg = g.json.fogline.segments[0];
  out.generate = 'stop_reason' in seg ? seg.stop_reason : null;
  return out;
}

test('stop_reason: the stop string or stop token id that ended the reply, null otherwise, on every transport', async () => {
  const every = (x, want, what) => {
    for (const k of ['chat', 'streamed', 'completions', 'ws', 'generate'])
      assert.deepEqual(x[k], want, `${what}: ${k}`);
    assert.deepEqual(x.n, [want, want], `${what}: n 2`);
  };
  const stop = 'shipped';
  const byString = generate(['--stop', 'no such text', '--stop', stop]);
  assert.equal(byString.stop_reason, stop, 'the CLI names the string');
  every(await reasons({ stop: ['no such text', stop] }), stop, 'a stop string');
  const byToken = generate(['--stop-token-ids', `7,${dot}`]);
  assert.equal(byToken.stop_reason, dot, 'the CLI names the token id');
  every(await reasons({ stop_token_ids: [7, dot] }), dot, 'a stop token id');
  // both: the reply ends at whichever comes first, and that one is named
  const first = plain.text.indexOf('.') < plain.text.indexOf(stop) ? dot : stop;
  assert.equal(generate(['--stop', stop, '--stop-token-ids', String(dot)]).stop_reason, first);
  every(await reasons({ stop: [stop], stop_token_ids: [dot] }), first, 'both');
  assert.equal(plain.finish, 'stop', 'test data: the greedy reply ends with the model\'s end token');
  assert.equal(plain.stop_reason, null);
  every(await reasons({}), null, 'the model\'s end token');
  every(await reasons({ max_tokens: 4 }), null, 'max_tokens');
});

test('a stop string that cut the text across a commit boundary, then a shorter one: no read past the cut', async () => {
  // the first commit's end lies inside the reply; a window of 4 bytes across it cuts the text
  // before where a 2-byte string's new occurrences could start (it was searched from there
  // with a length that wrapped around: a crash or heap corruption)
  const c = await connect(server);
  c.send({ type: 'chat', id: 'b', messages: msgs, temperature: 0 });
  const commits = (await c.collect('b')).filter((f) => f.type === 'commit').map((f) => f.text);
  assert.ok(commits.length > 1 && commits[0].length > 2, `test data: commits ${JSON.stringify(commits)}`);
  const cutAt = commits[0].length - 2;
  const w = plain.text.slice(cutAt, cutAt + 4);
  assert.equal(plain.text.indexOf(w), cutAt, `test data: ${JSON.stringify(w)} first occurs across the boundary`);
  for (const stop of [[w, 'Qz'], [w, 'Q'], ['Qz', w, 'Q']]) {
    c.send({ type: 'chat', id: 's', messages: msgs, temperature: 0, stop });
    const f = await c.collect('s');
    assert.equal(f.at(-1).type, 'done', JSON.stringify(f.at(-1)));
    // a commit is never taken back: the first stays whole, the cut one is empty
    assert.deepEqual(f.filter((x) => x.type === 'commit').map((x) => x.text), [commits[0], ''],
      `stop ${JSON.stringify(stop)}`);
    assert.equal(f.at(-1).stop_reason, w);
    const r = await client.chat.completions.create({ model: 'fogline', messages: msgs, temperature: 0, stop });
    assert.equal(r.choices[0].message.content, plain.text.slice(0, cutAt), `chat, stop ${JSON.stringify(stop)}`);
  }
  c.close();
});
