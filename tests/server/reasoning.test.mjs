// Chat templates as the ecosystem renders them, and reasoning split out of the reply, on a real
// server with the real Qwen3 tokenizer and template (tests/server/make_think_model.py: a model
// whose every output token is one added token, REPLY below, so what it says is known).
//
// - enable_thinking: the template's own default (undefined = true), chat_template_kwargs per
//   request, --chat-template-kwargs as the server's default: checked through usage.prompt_tokens
//   against @huggingface/jinja rendering Qwen3's template, tokenized by @huggingface/tokenizers
//   (the empty think block of enable_thinking=false is 4 tokens).
// - reasoning_content / content over HTTP (plain and streamed with the official openai client;
//   each choice of n > 1 and of a fan-out),
//   "reasoning"/"content" on WebSocket commits, a think tag cut by a stop string (the tails).
// - every bad chat_template_kwargs: HTTP 400, a WebSocket error frame, a one-line CLI error.
//
// What is end to end here: the template defaults and kwargs (prompt tokens from the real
// template), and the transport of the split (fields, streaming, tails). Tags cut at every
// possible point between commits are checked on the split itself (unit.test_reasoning): this
// model's tags always come whole inside one token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, startServer, connect, require } from './lib.mjs';

const OpenAI = require('openai').default;
const { Template } = require('@huggingface/jinja');
const { Tokenizer } = require('@huggingface/tokenizers');

const DIR = process.env.FL_THINK_MODEL;
const REPLY = '<think>\nThe user says hi.\n</think>\n\nHello! How can I help?';
const REASONING = 'The user says hi.';
const ANSWER = 'Hello! How can I help?';

const cfg = JSON.parse(fs.readFileSync(path.join(DIR, 'tokenizer_config.json'), 'utf8'));
const tpl = new Template(cfg.chat_template);
const refTok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(DIR, 'tokenizer.json'), 'utf8')), cfg);
// prompt tokens as Hugging Face renders and tokenizes the conversation; kwargs as the request's
const refPromptTokens = (messages, kwargs = {}) =>
  refTok.encode(tpl.render({ messages, add_generation_prompt: true, ...kwargs }), { add_special_tokens: false }).ids.length;

let server; // the template's own default
let noThink; // --chat-template-kwargs '{"enable_thinking": false}'
before(async () => {
  server = await startServer(['--threads', '1'], { model: DIR });
  noThink = await startServer(['--threads', '1', '--chat-template-kwargs', '{"enable_thinking": false}'], { model: DIR });
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
  assert.equal(await noThink.stop(), 0, noThink.log());
});

async function post(s, body) {
  const r = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

const CONVS = [
  [{ role: 'user', content: 'hi' }],
  [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'q1' },
    { role: 'assistant', content: '<think>\nearlier reasoning\n</think>\n\na1' }, { role: 'user', content: 'q2' }],
  [{ role: 'user', content: 'q1' }, { role: 'assistant', content: '<think>r</think>a' },
    { role: 'user', content: 'q2' }, { role: 'assistant', content: 'no think here' }, { role: 'user', content: 'q3' }],
];

test('enable_thinking: the template default, per request, and the server default', async () => {
  for (const messages of CONVS) {
    const on = refPromptTokens(messages), off = refPromptTokens(messages, { enable_thinking: false });
    assert.equal(off - on, 4, 'the reference: the empty think block is 4 tokens');
    assert.equal(refPromptTokens(messages, { enable_thinking: true }), on);
    for (const [s, kwargs, want] of [
      [server, undefined, on], [server, { enable_thinking: true }, on], [server, { enable_thinking: false }, off], [server, {}, on],
      [noThink, undefined, off], [noThink, { enable_thinking: true }, on], [noThink, { enable_thinking: false }, off],
    ]) {
      const r = await post(s, { messages, max_tokens: 1, ...(kwargs ? { chat_template_kwargs: kwargs } : {}) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.usage.prompt_tokens, want,
        `${s === server ? 'default server' : 'server with enable_thinking=false'}, kwargs ${JSON.stringify(kwargs)}, ${messages.length} messages`);
    }
  }
  // the WebSocket chat takes the same field
  const c = await connect(server);
  for (const [kwargs, want] of [[undefined, refPromptTokens(CONVS[0])], [{ enable_thinking: false }, refPromptTokens(CONVS[0], { enable_thinking: false })]]) {
    c.send({ type: 'chat', id: `k${want}`, messages: CONVS[0], max_tokens: 1, ...(kwargs ? { chat_template_kwargs: kwargs } : {}) });
    const frames = await c.collect(`k${want}`);
    const done = frames.at(-1);
    assert.equal(done.type, 'done', JSON.stringify(done));
    assert.equal(done.usage.prompt_tokens, want);
  }
  c.close();
});

test('a reply with a think block: reasoning_content and content (not streamed)', async () => {
  let r = await post(server, { messages: CONVS[0], max_tokens: 1 });
  assert.equal(r.status, 200);
  assert.equal(r.body.choices[0].message.reasoning_content, REASONING);
  assert.equal(r.body.choices[0].message.content, ANSWER);
  // after </think> the reply is answer as written, later tags included
  r = await post(server, { messages: CONVS[0], max_tokens: 3 });
  assert.equal(r.body.choices[0].message.reasoning_content, REASONING);
  assert.equal(r.body.choices[0].message.content, ANSWER + REPLY + REPLY);
  assert.equal(r.body.choices[0].finish_reason, 'length');
  // logprobs cover every reply token, the reasoning's too: their texts are the raw reply
  r = await post(server, { messages: CONVS[0], max_tokens: 3, logprobs: true, top_logprobs: 1 });
  assert.equal(r.body.choices[0].message.reasoning_content, REASONING);
  const lp = r.body.choices[0].logprobs.content;
  assert.equal(lp.map((e) => e.token).join(''), REPLY.repeat(3));
  assert.deepEqual(lp.map((e) => e.top_logprobs[0].token), [REPLY, REPLY, REPLY]);
  // streamed: the same entries, also from commits whose text the split holds back
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: CONVS[0], max_tokens: 3, logprobs: true, top_logprobs: 1, stream: true }) });
  const streamed = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {'))
    .flatMap((e) => JSON.parse(e.slice(6)).choices.flatMap((c) => c.logprobs?.content ?? []));
  assert.deepEqual(streamed, lp);
});

test('usage counts the reply tokens of its think block (reasoning_tokens) on every route', async () => {
  // three REPLY tokens: the first holds the whole think block, the other two are answer
  const r = await post(server, { messages: CONVS[0], max_tokens: 3 });
  assert.equal(r.body.usage.completion_tokens, 3);
  assert.deepEqual(r.body.usage.completion_tokens_details, { reasoning_tokens: 1 });
  // n: each choice's summed; streamed: the usage chunk says the same
  const two = await post(server, { messages: CONVS[0], max_tokens: 3, n: 2 });
  assert.deepEqual(two.body.usage.completion_tokens_details, { reasoning_tokens: 2 });
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: CONVS[0], max_tokens: 3, stream: true, stream_options: { include_usage: true } }) });
  const usage = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {'))
    .map((e) => JSON.parse(e.slice(6))).find((c) => c.usage)?.usage;
  assert.deepEqual(usage.completion_tokens_details, { reasoning_tokens: 1 });
  // a reply whose think block a stop string cut away (its text is empty): none
  const cut = await post(server, { messages: CONVS[0], max_tokens: 3, stop: ['<think>'] });
  assert.equal(cut.body.choices[0].message.content, '');
  assert.deepEqual(cut.body.usage.completion_tokens_details, { reasoning_tokens: 0 });
  // the WebSocket's done and the Responses API's output_tokens_details
  const c = await connect(server);
  c.send({ type: 'chat', id: 'u', messages: CONVS[0], max_tokens: 3 });
  const done = (await c.collect('u', 60000)).at(-1);
  c.close();
  assert.equal(done.usage.reasoning_tokens, 1);
  const resp = await (await fetch(`${server.url}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: 'hi', max_output_tokens: 3 }) })).json();
  assert.deepEqual(resp.usage.output_tokens_details, { reasoning_tokens: 1 });
});

test('streamed with the openai client: delta.reasoning_content, then delta.content', async () => {
  const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: 'fogline', messages: CONVS[1], max_tokens: 9, stream: true });
  let reasoning = '', content = '', order = [];
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta || {};
    if (d.reasoning_content) { reasoning += d.reasoning_content; order.push('r'); }
    if (d.content) { content += d.content; order.push('c'); }
  }
  assert.equal(reasoning, REASONING);
  assert.equal(content, ANSWER + REPLY.repeat(8));
  assert.equal(order[0], 'r');
  assert.ok(order.lastIndexOf('r') < order.indexOf('c'), order.join(''));
  assert.ok(order.length >= 3, `several commits: ${order.join('')}`);
});

test('every choice of n > 1 and every fan-out segment is split as a lone reply (HTTP)', async () => {
  // n samples, plain and streamed; the stop string cuts </think> (its tail goes out at the end)
  const stop = 'ink>\n\nHello';
  let r = await post(server, { messages: CONVS[0], max_tokens: 3, n: 3 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.choices.map((c) => [c.index, c.message.reasoning_content, c.message.content]),
    [0, 1, 2].map((i) => [i, REASONING, ANSWER + REPLY + REPLY]));
  const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const alone = (await post(server, { messages: CONVS[0], max_tokens: 4, stop: [stop] })).body;
  const stream = await client.chat.completions.create({ model: 'fogline', messages: CONVS[0],
    max_tokens: 4, n: 2, stop: [stop], stream: true });
  const got = [{ r: '', c: '' }, { r: '', c: '' }];
  for await (const ch of stream)
    for (const c of ch.choices) {
      got[c.index].r += c.delta.reasoning_content ?? '';
      got[c.index].c += c.delta.content ?? '';
    }
  const want = { r: alone.choices[0].message.reasoning_content, c: alone.choices[0].message.content };
  assert.ok(want.r.length > REASONING.length, `the cut tag is reasoning text: ${JSON.stringify(want)}`);
  assert.deepEqual(got, [want, want]);
  // a fan-out's choices
  r = await post(server, { messages: [], max_tokens: 1,
    parallel: { mode: 'fanout', segments: ['hi', 'hello'] } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.choices.map((c) => [c.message.reasoning_content, c.message.content]),
    [[REASONING, ANSWER], [REASONING, ANSWER]]);
});

test('WebSocket commits carry each block\'s reasoning and content; text stays the raw reply', async () => {
  const c = await connect(server);
  c.send({ type: 'chat', id: 'w1', messages: CONVS[0], max_tokens: 9 });
  const frames = await c.collect('w1');
  const commits = frames.filter((f) => f.type === 'commit');
  assert.ok(commits.length >= 2, `${commits.length} commits`);
  assert.equal(commits.map((f) => f.text).join(''), REPLY.repeat(9));
  assert.equal(commits.map((f) => f.reasoning).join(''), REASONING);
  assert.equal(commits.map((f) => f.content).join(''), ANSWER + REPLY.repeat(8));
  for (const f of commits) assert.ok(typeof f.reasoning === 'string' && typeof f.content === 'string');
  const done = frames.at(-1);
  assert.equal(done.type, 'done');
  assert.equal(done.reasoning_tail, undefined);
  assert.equal(done.content_tail, undefined);
  c.close();
});

test('a stop string that cuts </think>: the cut tag is reasoning text, sent at the end', async () => {
  const stop = 'ink>\n\nHello';
  const want = '\n</th'; // reasoning's trailing newline was held with the tag's start
  const c = await connect(server);
  c.send({ type: 'chat', id: 's1', messages: CONVS[0], max_tokens: 4, stop: [stop] });
  const frames = await c.collect('s1');
  const commits = frames.filter((f) => f.type === 'commit');
  assert.equal(commits.map((f) => f.text).join(''), '<think>\nThe user says hi.\n</th');
  assert.equal(commits.map((f) => f.reasoning).join(''), REASONING);
  assert.equal(commits.map((f) => f.content).join(''), '');
  const done = frames.at(-1);
  assert.equal(done.finish, 'stop');
  assert.equal(done.reasoning_tail, want);
  assert.equal(done.content_tail, undefined);
  c.close();
  const r = await post(server, { messages: CONVS[0], max_tokens: 4, stop: [stop] });
  assert.equal(r.body.choices[0].message.reasoning_content, REASONING + want);
  assert.equal(r.body.choices[0].message.content, '');
  const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: 'fogline', messages: CONVS[0], max_tokens: 4, stop: [stop], stream: true });
  const deltas = [];
  for await (const ch of stream) if (ch.choices[0]?.delta) deltas.push(ch.choices[0].delta);
  assert.equal(deltas.map((d) => d.reasoning_content || '').join(''), REASONING + want);
  assert.equal(deltas.map((d) => d.content || '').join(''), '');
});

test('enable_thinking=false: the empty think block is in the prompt, the reply is split all the same', async () => {
  // the model ignores the switch (its one token has a think block): the split follows the reply
  const r = await post(noThink, { messages: CONVS[0], max_tokens: 1 });
  assert.equal(r.body.choices[0].message.reasoning_content, REASONING);
  assert.equal(r.body.choices[0].message.content, ANSWER);
});

const BAD = [
  ['"yes"', /must be a JSON object/],
  [[], /must be a JSON object/],
  [{ enable_thinking: 'false' }, /'enable_thinking' must be true or false/],
  [{ enable_thinking: 1 }, /'enable_thinking' must be true or false/],
  [{ enable_thinking: null }, /'enable_thinking' must be true or false/],
  [{ thinking: true }, /unknown key 'thinking'/],
];

test('bad chat_template_kwargs: HTTP 400 with a JSON body, a WebSocket error frame', async () => {
  const c = await connect(server);
  for (const [v, re] of BAD) {
    const kw = typeof v === 'string' ? JSON.parse(v) : v;
    const r = await post(server, { messages: CONVS[0], chat_template_kwargs: kw });
    assert.equal(r.status, 400, JSON.stringify(v));
    assert.equal(r.body.error.code, 'bad_request');
    assert.equal(r.body.error.param, 'chat_template_kwargs');
    assert.match(r.body.error.message, re);
    c.send({ type: 'chat', id: 'b1', messages: CONVS[0], chat_template_kwargs: kw });
    const f = await c.next((x) => x.id === 'b1');
    assert.equal(f.type, 'error');
    assert.equal(f.code, 'bad_request');
    assert.match(f.message, re);
  }
  c.close();
});

function run(args, env = {}) {
  return new Promise((resolve) => {
    const p = spawn(BIN, args, { env: { ...process.env, ...env } });
    let err = '';
    p.stderr.on('data', (d) => (err += d));
    p.stdout.resume();
    p.on('exit', (code) => resolve({ code, err }));
  });
}

test('bad --chat-template-kwargs / FOGLINE_CHAT_TEMPLATE_KWARGS: one line, exit 2', async () => {
  for (const [args, env, re] of [
    [['--chat-template-kwargs', '{"enable_thinking": fals'], {}, /--chat-template-kwargs is not valid JSON/],
    [['--chat-template-kwargs', '[true]'], {}, /--chat-template-kwargs must be a JSON object/],
    [['--chat-template-kwargs', '{"enable_thinking": "no"}'], {}, /'enable_thinking' must be true or false/],
    [['--chat-template-kwargs', '{"tools": []}'], {}, /unknown key 'tools'/],
    [[], { FOGLINE_CHAT_TEMPLATE_KWARGS: 'false' }, /FOGLINE_CHAT_TEMPLATE_KWARGS must be a JSON object/],
  ]) {
    const r = await run(['serve', '--model', DIR, ...args], env);
    assert.equal(r.code, 2, `${args.join(' ')} ${JSON.stringify(env)}: ${r.err}`);
    assert.equal(r.err.trim().split('\n').length, 1, r.err);
    assert.match(r.err, /^fogline serve: /);
    assert.match(r.err, re);
  }
});
