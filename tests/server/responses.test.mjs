// OpenAI's Responses API (POST /v1/responses, docs/protocol.md) with the official `openai`
// client: its `responses.create` and its `responses.stream` helper, whose accumulator checks the
// events' order (response.created first, an item added before its parts, a part before its
// deltas) as it rebuilds the response. A Responses request means a chat completions request
// (input items as messages, instructions as the system message, text.format as
// response_format, flat function tools as chat tools), so every answer is compared with
// /v1/chat/completions' for the same conversation: the same text, reasoning, calls and prompt
// tokens. On the built-in model: text, streaming, max_output_tokens, json_schema, sampling with
// a seed; on a model with Qwen3's real template that always thinks first (FL_THINK_MODEL):
// reasoning items and function calls, and a call's round trip as input items. Then every
// bad input by its 400 and param.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, require, user, FOUR_QUESTIONS, metrics, until, connect } from './lib.mjs';
import { startRedis, cli } from './redis_lib.mjs';

const OpenAI = require('openai').default;
const Ajv = require('ajv');

const THINK = process.env.FL_THINK_MODEL;
const CALLS = process.env.FL_CALLS_MODEL; // thinks, then calls two tools at once
const Q = 'Where is my order 48213? How long does express shipping take?';

let builtin, think, bc, tc;
before(async () => {
  builtin = await startServer(['--max-tokens', '64']);
  think = await startServer([], { model: THINK });
  bc = new OpenAI({ apiKey: 'x', baseURL: `${builtin.url}/v1`, maxRetries: 0 });
  tc = new OpenAI({ apiKey: 'x', baseURL: `${think.url}/v1`, maxRetries: 0 });
});
after(async () => {
  assert.equal(await builtin.stop(), 0, builtin.log());
  assert.equal(await think.stop(), 0, think.log());
});

// the events of a streamed response, checked for their numbering, and the client's own result
async function streamed(client, body) {
  const stream = client.responses.stream({ model: 'fogline', ...body });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `event ${i} (${ev.type}) numbered`));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  assert.equal(events.at(-1).response.id, events[0].response.id);
  return { events, final };
}

// what matters of an output item, ids aside (each request has its own)
const shape = (items) => items.map((it) => ({ type: it.type, status: it.status,
  text: it.content?.map((c) => c.text).join(''), name: it.name, arguments: it.arguments }));

test('text: the chat reply of the same conversation, plain and streamed; instructions are the system message', async () => {
  // (top_logprobs 0 asks for nothing: accepted, as OpenAI's fields a client may always send)
  const r = await bc.responses.create({ model: 'fogline', input: Q, instructions: 'Answer briefly.',
    top_logprobs: 0, store: false, metadata: { k: 'v' }, reasoning: { effort: 'low' }, truncation: 'disabled' });
  assert.deepEqual(r.metadata, { k: 'v' });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.instructions, 'Answer briefly.');
  const chat = await bc.chat.completions.create({ model: 'fogline', temperature: 0,
    messages: [{ role: 'system', content: 'Answer briefly.' }, ...user(Q)] });
  assert.equal(r.output_text, chat.choices[0].message.content);
  assert.ok(r.output_text.length > 10, r.output_text);
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.deepEqual(r.usage.output_tokens_details, { reasoning_tokens: 0 }, 'a model without think blocks');
  // streamed: deltas that add up, the same items, response.completed last
  const { events, final } = await streamed(bc, { input: Q, instructions: 'Answer briefly.' });
  assert.equal(events.at(-1).type, 'response.completed');
  assert.equal(final.output_text, r.output_text);
  assert.deepEqual(shape(final.output), shape(r.output));
  const deltas = events.filter((e) => e.type === 'response.output_text.delta');
  assert.ok(deltas.length > 1, 'the text comes as it is committed, in several deltas');
  assert.equal(deltas.map((e) => e.delta).join(''), r.output_text);
  const u = events.at(-1).response.usage;
  assert.deepEqual([u.input_tokens, u.output_tokens, u.total_tokens], [r.usage.input_tokens,
    r.usage.output_tokens, r.usage.total_tokens]);
  // the same prompt again: its whole blocks come from the engine's prefix cache
  assert.ok(u.input_tokens_details.cached_tokens > 0, JSON.stringify(u));
});

test('input items: text parts, roles, an earlier assistant turn; max_output_tokens ends it incomplete', async () => {
  const input = [
    { role: 'developer', content: 'You are the help desk.' },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi, ' }, { type: 'input_text', text: 'I have a question.' }] },
    { role: 'assistant', content: [{ type: 'output_text', text: 'Sure, what is it?' }] },
    { role: 'user', content: Q },
  ];
  const msgs = [{ role: 'system', content: 'You are the help desk.' },
    { role: 'user', content: 'Hi, I have a question.' }, { role: 'assistant', content: 'Sure, what is it?' }, ...user(Q)];
  const r = await bc.responses.create({ model: 'fogline', input });
  const chat = await bc.chat.completions.create({ model: 'fogline', temperature: 0, messages: msgs });
  assert.equal(r.output_text, chat.choices[0].message.content);
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  const cut = await bc.responses.create({ model: 'fogline', input, max_output_tokens: 6 });
  const chatCut = await bc.chat.completions.create({ model: 'fogline', temperature: 0, messages: msgs, max_tokens: 6 });
  assert.equal(cut.status, 'incomplete');
  assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(cut.output[0].status, 'incomplete');
  assert.equal(cut.output_text, chatCut.choices[0].message.content);
  assert.equal(cut.usage.output_tokens, 6);
  const { events, final } = await streamed(bc, { input, max_output_tokens: 6 });
  assert.equal(events.at(-1).type, 'response.incomplete');
  assert.equal(final.status, 'incomplete');
  assert.equal(final.output_text, cut.output_text);
});

test('text.format json_schema: valid JSON for the schema, as response_format gives it; sampling with a seed', async () => {
  const schema = { type: 'object', properties: { order: { type: 'integer' }, status: { enum: ['shipped', 'pending'] } },
    required: ['order', 'status'], additionalProperties: false };
  const r = await bc.responses.create({ model: 'fogline', input: Q, max_output_tokens: 60,
    text: { format: { type: 'json_schema', name: 'order', schema, strict: true } } });
  const chat = await bc.chat.completions.create({ model: 'fogline', temperature: 0, messages: user(Q), max_tokens: 60,
    response_format: { type: 'json_schema', json_schema: { name: 'order', schema, strict: true } } });
  assert.equal(r.output_text, chat.choices[0].message.content);
  const validate = new Ajv({ strict: false }).compile(schema);
  assert.ok(validate(JSON.parse(r.output_text)), `${r.output_text}: ${JSON.stringify(validate.errors)}`);
  assert.equal(r.text.format.type, 'json_schema');
  // sampled: the seed gives the chat reply of the same seed; the answer repeats the sampling
  const hot = { temperature: 1.5, top_p: 0.9, seed: 5 };
  const s = await bc.responses.create({ model: 'fogline', input: 'Tell me about zebras and pianos.', ...hot });
  const sc = await bc.chat.completions.create({ model: 'fogline', messages: user('Tell me about zebras and pianos.'), ...hot });
  assert.equal(s.output_text, sc.choices[0].message.content);
  assert.equal(s.temperature, 1.5);
  assert.equal(s.top_p, 0.9);
});

test('reasoning: a reasoning item before the message, as the chat split gives reasoning_content', async () => {
  const chat = await tc.chat.completions.create({ model: 'fogline', messages: user('hi') });
  const m = chat.choices[0].message;
  assert.ok(m.reasoning_content?.length > 0, `test data: the model thinks (${JSON.stringify(m)})`);
  const r = await tc.responses.create({ model: 'fogline', input: 'hi' });
  assert.deepEqual(r.output.map((it) => it.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.equal(r.output[0].content[0].text, m.reasoning_content);
  assert.equal(r.output_text, m.content);
  const { events, final } = await streamed(tc, { input: 'hi' });
  assert.deepEqual(shape(final.output), shape(r.output));
  assert.equal(events.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join(''),
    m.reasoning_content);
  assert.equal(final.output_text, m.content);
});

const TOOLS = [
  { type: 'function', name: 'get_order', description: 'Look an order up by its number', strict: true,
    parameters: { type: 'object', properties: { order_id: { type: 'integer' } }, required: ['order_id'],
      additionalProperties: false } },
  { type: 'function', name: 'ping', parameters: { type: 'object' } },
];
const CHAT_TOOLS = TOOLS.map(({ type, ...f }) => ({ type, function: f }));

test('function tools: a call item as chat gives the call; the round trip as input items', async () => {
  const r = await tc.responses.create({ model: 'fogline', input: 'Where is order 12?', tools: TOOLS,
    tool_choice: 'required', max_output_tokens: 160 });
  const chat = await tc.chat.completions.create({ model: 'fogline', messages: user('Where is order 12?'),
    tools: CHAT_TOOLS, tool_choice: 'required', max_tokens: 160 });
  const want = chat.choices[0].message.tool_calls;
  assert.equal(want.length, 1, JSON.stringify(chat));
  const calls = r.output.filter((it) => it.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  assert.equal(calls[0].name, want[0].function.name);
  assert.equal(calls[0].arguments, want[0].function.arguments);
  assert.match(calls[0].call_id, /^call_/);
  assert.equal(calls[0].status, 'completed');
  JSON.parse(calls[0].arguments);
  // named; streamed, the client assembles the arguments
  const { events, final } = await streamed(tc, { input: 'Where is order 12?', tools: TOOLS,
    tool_choice: { type: 'function', name: 'ping' }, max_output_tokens: 160 });
  const fc = final.output.filter((it) => it.type === 'function_call');
  assert.equal(fc.length, 1);
  assert.equal(fc[0].name, 'ping');
  assert.ok(events.some((e) => e.type === 'response.function_call_arguments.done'));
  // the round trip: the call and its output as input items render as chat's tool messages
  const input = [{ role: 'user', content: 'Where is order 12?' },
    { type: 'function_call', call_id: calls[0].call_id, name: calls[0].name, arguments: calls[0].arguments },
    { type: 'function_call_output', call_id: calls[0].call_id, output: '{"status": "shipped"}' }];
  const back = await tc.responses.create({ model: 'fogline', input, tools: TOOLS });
  const cb = await tc.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: [...user('Where is order 12?'),
    { role: 'assistant', content: null, tool_calls: [{ id: calls[0].call_id, type: 'function',
      function: { name: calls[0].name, arguments: calls[0].arguments } }] },
    { role: 'tool', tool_call_id: calls[0].call_id, content: '{"status": "shipped"}' }] });
  assert.equal(back.usage.input_tokens, cb.usage.prompt_tokens);
  assert.equal(back.output_text, cb.choices[0].message.content ?? '');
});

test('chat completions n > 1 with tools: each choice\'s calls as the lone request with seed + i gives them', async () => {
  const body = { model: 'fogline', messages: user('Where is order 12?'), tools: CHAT_TOOLS, tool_choice: 'required',
    max_tokens: 160, temperature: 1, seed: 40 };
  const both = await tc.chat.completions.create({ ...body, n: 2 });
  assert.equal(both.choices.length, 2);
  const calls = (m) => m.tool_calls?.map((x) => x.function);
  for (const [i, ch] of both.choices.entries()) {
    const alone = await tc.chat.completions.create({ ...body, seed: 40 + i });
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
    assert.equal(ch.message.content, null);
    assert.equal(ch.message.tool_calls.length, 1);
    assert.deepEqual(calls(ch.message), calls(alone.choices[0].message), `choice ${i}`);
  }
  // streamed: each index's calls and finish, as the client assembles them
  const stream = await tc.chat.completions.create({ ...body, n: 2, stream: true });
  const got = [[], []], fin = [];
  for await (const c of stream)
    for (const ch of c.choices) {
      for (const t of ch.delta?.tool_calls ?? []) got[ch.index].push(t.function);
      if (ch.finish_reason) fin[ch.index] = ch.finish_reason;
    }
  assert.deepEqual(fin, ['tool_calls', 'tool_calls']);
  assert.deepEqual(got, both.choices.map((ch) => calls(ch.message)));
  // the WebSocket: each segment_done carries its choice's calls
  const ws = await connect(think);
  try {
    ws.send({ type: 'chat', id: 'n2', messages: body.messages, tools: CHAT_TOOLS, tool_choice: 'required',
      max_tokens: 160, temperature: 1, seed: 40, n: 2 });
    const frames = await ws.collect('n2', 60000);
    const segs = frames.filter((f) => f.type === 'segment_done').sort((a, b) => a.segment - b.segment);
    assert.deepEqual(segs.map((f) => f.tool_calls?.map((x) => x.function)), both.choices.map((ch) => calls(ch.message)));
  } finally {
    ws.close();
  }
});

test('bad input: 400 naming the field the client sent', async () => {
  const cases = [
    [{}, 'input', /'input' is required/],
    [{ input: 5 }, 'input', /a string or a non-empty array/],
    [{ input: [] }, 'input', /a string or a non-empty array/],
    [{ input: ['hi'] }, 'input', /input\[0\] must be an object/],
    [{ input: [{ role: 'robot', content: 'x' }] }, 'input', /input\[0\]\.role must be/],
    [{ input: [{ role: 'user', content: 7 }] }, 'input', /input\[0\]\.content must be a string or an array/],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input',
      /input\[0\]\.content\[0\]: type 'input_image' is not supported/],
    [{ input: [{ role: 'user', content: [{ type: 'input_text' }] }] }, 'input', /content\[0\]\.text must be a string/],
    [{ input: [{ type: 'web_search_call' }] }, 'input', /item type 'web_search_call' is not supported/],
    // (reasoning items are dropped from history: alone, nothing is left to answer)
    [{ input: [{ type: 'reasoning', summary: [] }] }, 'input', /'input' has no message: reasoning items are dropped from history/],
    [{ input: [{ type: 'function_call', name: 'f' }] }, 'input', /needs 'call_id', 'name' and 'arguments'/],
    [{ input: [{ type: 'function_call_output', output: 'x' }] }, 'input', /needs a 'call_id'/],
    [{ input: 'hi', instructions: 3 }, 'instructions', /'instructions' must be a string/],
    [{ input: 'hi', previous_response_id: 7 }, 'previous_response_id', /must be a string of 1\.\.128 bytes/],
    [{ input: 'hi', previous_response_id: 'resp_1', session: 's' }, 'previous_response_id', /cannot be combined/],
    [{ input: 'hi', conversation: 'c' }, 'conversation', /not supported/],
    [{ input: 'hi', background: true }, 'background', /not supported/],
    [{ input: 'hi', prompt: { id: 'p' } }, 'prompt', /not supported/],
    [{ input: 'hi', top_logprobs: 2 }, 'top_logprobs', /not supported/],
    [{ input: 'hi', messages: [] }, 'messages', /belongs to \/v1\/chat\/completions/],
    [{ input: 'hi', n: 2 }, 'n', /belongs to \/v1\/chat\/completions/],
    [{ input: 'hi', max_output_tokens: 0 }, 'max_output_tokens', /^'max_output_tokens' must be in \[1, 1024\], got 0$/],
    [{ input: 'hi', text: 'json' }, 'text', /'text' must be an object/],
    [{ input: 'hi', text: { format: { type: 'yaml' } } }, 'text.format', /^'text.format' type 'yaml' is not one of/],
    [{ input: 'hi', text: { format: { type: 'json_schema' } } }, 'text.format', /'text.format.json_schema.schema' must be/],
    [{ input: 'hi', tool_choice: 'required' }, 'tool_choice', /'tools' is empty/],
    // (found when the template is rendered, after parsing: the same renaming)
    [{ input: [{ role: 'user', content: 'hi' }, { type: 'function_call_output', call_id: 'c', output: 'x' }] },
      'input', /no tool syntax/],
    [{ input: 'hi', tools: [{ type: 'web_search' }] }, 'tools', /tools\[0\]: type 'web_search' is not supported/],
    [{ input: 'hi', tools: {} }, 'tools', /'tools' must be an array/],
    [{ input: 'hi', tool_choice: { type: 'allowed_tools' } }, 'tool_choice', /'tool_choice' must be/],
    [{ input: 'hi', temperature: 5 }, 'temperature', /temperature/],
  ];
  for (const [body, param, re] of cases) {
    const res = await fetch(`${builtin.url}/v1/responses`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const j = await res.json();
    const what = JSON.stringify(body);
    assert.equal(res.status, 400, `${what}: ${JSON.stringify(j)}`);
    assert.equal(j.error.param, param, `${what}: ${JSON.stringify(j)}`);
    assert.match(j.error.message, re, what);
  }
  const get = await fetch(`${builtin.url}/v1/responses`);
  assert.equal(get.status, 405);
});

test('a stream cut short (the server stops past its grace period): an error event, then the end', async () => {
  // the engine held, one token per forward: the stream has begun (a delta went out) long
  // before the reply could end, whatever the machine's speed
  const s = await startServer(['--drain-timeout', '0.3'], { hold: true });
  // the headers go out with the first event, at the first commit: the fetch resolves then
  const pending = fetch(`${s.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: FOUR_QUESTIONS, max_output_tokens: 64, stream: true,
      decoding: { policy: 'sequential' } }) });
  let res = null;
  pending.then((r) => { res = r; });
  await s.waitLog(/event=submitted req="resp_/);
  let text = '';
  let reader = null;
  const more = async () => {
    const { value, done } = await reader.read();
    if (!done) text += new TextDecoder().decode(value);
    return !done;
  };
  for (let i = 0; !text.includes('response.output_text.delta'); i++) {
    assert.ok(i < 60, `no delta after ${i} forwards: ${text}`);
    await s.step();
    // what the forward sent: read until the server has nothing more to say for now
    const pause = new Promise((r) => setTimeout(r, 300));
    if (!res) await Promise.race([pending, pause]);
    if (res && !reader) {
      assert.equal(res.status, 200);
      reader = res.body.getReader();
    }
    if (reader) await Promise.race([more(), pause]);
  }
  s.proc.kill('SIGTERM');
  while (await more());
  const events = text.trim().split('\n\n').map((e) => {
    const [ev, data] = e.split('\n');
    return { event: ev.replace('event: ', ''), data: JSON.parse(data.replace('data: ', '')) };
  });
  const last = events.at(-1);
  assert.equal(last.event, 'error', text.slice(-400));
  assert.equal(last.data.type, 'error');
  assert.equal(last.data.code, 'shutting_down');
  assert.equal(last.data.error.code, 'shutting_down');
  assert.ok(!events.some((e) => e.event === 'response.completed'));
  events.forEach((e, i) => assert.equal(e.data.sequence_number, i, `event ${i} numbered`));
  assert.equal(await s.exited, 0);
});

// (a server connects to Redis after it listens: a turn before that has no history)
const connected = (srv) => until(async () => (await metrics(srv)).get('fogline_redis_connected') === 1,
  10000, 'connected to Redis');

test('previous_response_id: the stored conversation continues, on another server process too; not found is 404', async () => {
  const r = await startRedis();
  const a = await startServer(['--redis', r.url]);
  const b = await startServer(['--redis', r.url]);
  try {
    await connected(a);
    await connected(b);
    const ca = new OpenAI({ apiKey: 'x', baseURL: `${a.url}/v1`, maxRetries: 0 });
    const cb = new OpenAI({ apiKey: 'x', baseURL: `${b.url}/v1`, maxRetries: 0 });
    const written = async (srv, n) => until(async () =>
      (await metrics(srv)).get('fogline_session_total', { outcome: 'written' }) === n, 5000, `${n} stored`);
    const q1 = 'Where is my order 48213?', q2 = 'How long does express shipping take?', q3 = 'Thanks!';
    const r1 = await ca.responses.create({ model: 'fogline', input: q1, instructions: 'You are the help desk.' });
    assert.equal(r1.store, true);
    await written(a, 1);
    // (instructions are not kept: OpenAI does not carry them over to the next response)
    const kept = JSON.parse(await cli(r.port, ['GET', `fogline:session:${r1.id}`]));
    assert.deepEqual(kept.messages.map((m) => m.role), ['user', 'assistant']);
    // the second turn on the other process: the first turn's messages come before it, after
    // this request's own instructions
    const r2 = await cb.responses.create({ model: 'fogline', input: q2, previous_response_id: r1.id,
      instructions: 'Answer briefly.' });
    assert.equal(r2.previous_response_id, r1.id);
    const msgs = [{ role: 'system', content: 'Answer briefly.' }, ...user(q1),
      { role: 'assistant', content: r1.output_text }, ...user(q2)];
    const chat = await cb.chat.completions.create({ model: 'fogline', temperature: 0, messages: msgs });
    assert.equal(r2.usage.input_tokens, chat.usage.prompt_tokens, 'the prompt holds the first turn');
    assert.equal(r2.output_text, chat.choices[0].message.content);
    await written(b, 1);
    // a third turn from the second: all of it, streamed
    const { events: ev3, final } = await streamed(ca, { input: q3, previous_response_id: r2.id });
    const chat3 = await ca.chat.completions.create({ model: 'fogline', temperature: 0, messages: [...msgs.slice(1),
      { role: 'assistant', content: r2.output_text }, ...user(q3)] });
    assert.equal(final.usage.input_tokens, chat3.usage.prompt_tokens);
    assert.equal(final.output_text, chat3.choices[0].message.content);
    // the first response is still there: a branch from it does not see the second turn
    const fork = await ca.responses.create({ model: 'fogline', input: q3, previous_response_id: r1.id });
    const chatFork = await ca.chat.completions.create({ model: 'fogline', temperature: 0, messages: [
      ...user(q1), { role: 'assistant', content: r1.output_text }, ...user(q3)] });
    assert.equal(fork.usage.input_tokens, chatFork.usage.prompt_tokens);
    // store: false keeps nothing; an unknown id is 404, on both
    const loose = await ca.responses.create({ model: 'fogline', input: q1, store: false });
    assert.equal(loose.store, false);
    for (const [id, re] of [[loose.id, /was not found/], ['resp_nope', /was not found/]]) {
      const res = await fetch(`${a.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: 'hi', previous_response_id: id }) });
      const j = await res.json();
      assert.equal(res.status, 404, JSON.stringify(j));
      assert.equal(j.error.code, 'previous_response_not_found');
      assert.equal(j.error.param, 'previous_response_id');
      assert.match(j.error.message, re);
    }
    assert.equal(await cli(r.port, ['EXISTS', `fogline:session:${loose.id}`]), '0\n');
    // a fogline session named by the client: the turn is kept under the session, not the id
    const own = await ca.responses.create({ model: 'fogline', input: q1, session: 'rs-1' });
    assert.equal(own.store, false);
    await written(a, 4);
    assert.equal(await cli(r.port, ['EXISTS', 'fogline:session:rs-1']), '1\n');
    assert.equal(await cli(r.port, ['EXISTS', `fogline:session:${own.id}`]), '0\n');
    // GET /v1/responses/ID: the answer as it was sent, from any process (the plain answer's
    // fogline statistics aside); streamed, the completed event's response
    const { fogline, ...sent } = r1;
    assert.ok(fogline, 'test data: the plain answer has its statistics');
    assert.deepEqual(await cb.responses.retrieve(r1.id), sent);
    await until(async () => (await cli(r.port, ['EXISTS', `fogline:session:${final.id}`])) === '1\n', 5000, 'stored');
    // GET /v1/responses/ID/input_items: every turn's input and output before the reply, newest
    // first by default; the SDK pages through them with 'after'
    const texts = (items) => items.map((it) => `${it.role}: ${it.content.map((c) => c.text).join('')}`);
    const want = [`user: ${q1}`, `assistant: ${r1.output_text}`, `user: ${q2}`, `assistant: ${r2.output_text}`, `user: ${q3}`];
    const paged = [];
    for await (const it of ca.responses.inputItems.list(final.id, { order: 'asc', limit: 2 })) paged.push(it);
    assert.deepEqual(texts(paged), want);
    assert.equal(new Set(paged.map((it) => it.id)).size, 5, 'every item has its own id');
    const newest = await cb.responses.inputItems.list(final.id);
    assert.deepEqual(texts(newest.data), [...want].reverse());
    assert.equal(newest.has_more, false);
    assert.deepEqual(texts((await ca.responses.inputItems.list(r1.id)).data), [`user: ${q1}`]);
    for (const [q, param] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=x', 'limit'],
      ['order=up', 'order'], ['after=nope', 'after']]) {
      const res = await fetch(`${a.url}/v1/responses/${final.id}/input_items?${q}`);
      assert.equal(res.status, 400, q);
      assert.equal((await res.json()).error.param, param, q);
    }
    const { output_text: _, ...got } = await ca.responses.retrieve(final.id); // (the SDK adds output_text)
    assert.equal(ev3.at(-1).type, 'response.completed');
    assert.deepEqual(got, ev3.at(-1).response);
    // DELETE: gone for retrieving and for continuing; a client's session of a response's
    // name is no response (neither shown nor deleted)
    await ca.responses.delete(fork.id);
    const notFound = async (p, init = {}) => {
      const res = await fetch(`${b.url}/v1/responses/${p}`, init);
      const j = await res.json();
      assert.equal(res.status, 404, `${p}: ${JSON.stringify(j)}`);
      assert.equal(j.error.code, 'not_found');
      return j.error.message;
    };
    assert.match(await notFound(fork.id), /no stored response .*deleted/);
    assert.match(await notFound(fork.id, { method: 'DELETE' }), /no stored response/);
    assert.equal(await cli(r.port, ['EXISTS', `fogline:session:${fork.id}`]), '0\n');
    const again = await fetch(`${a.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'hi', previous_response_id: fork.id }) });
    assert.equal(again.status, 404);
    await notFound('rs-1');
    await notFound('rs-1', { method: 'DELETE' });
    assert.equal(await cli(r.port, ['EXISTS', 'fogline:session:rs-1']), '1\n');
    assert.match(await notFound('a%20b'), /ID a response's id/);
    // bad requests: a stream of a stored response (background responses only), another method
    const st = await fetch(`${a.url}/v1/responses/${r1.id}?stream=true`);
    assert.equal(st.status, 400);
    assert.equal((await st.json()).error.param, 'stream');
    const put = await fetch(`${a.url}/v1/responses/${r1.id}`, { method: 'PUT', body: '{}' });
    assert.equal(put.status, 405);
    assert.equal(put.headers.get('allow'), 'GET, DELETE');
  } finally {
    assert.equal(await a.stop(), 0, a.log());
    assert.equal(await b.stop(), 0, b.log());
  }
  // without --redis nothing is stored: store is false, previous_response_id a 400
  const plain = await bc.responses.create({ model: 'fogline', input: 'hi', max_output_tokens: 4 });
  assert.equal(plain.store, false);
  const res = await fetch(`${builtin.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'hi', previous_response_id: 'resp_1' }) });
  assert.equal(res.status, 400);
  assert.match((await res.json()).error.message, /needs a server with --redis/);
  const got = await fetch(`${builtin.url}/v1/responses/${plain.id}`);
  assert.equal(got.status, 404);
  assert.match((await got.json()).error.message, /without --redis/);
});

test('parallel_tool_calls false keeps a reply\'s first call (chat, streamed and not, n 2, Responses, the WebSocket, a stored turn); not a boolean: 400', async () => {
  // a model that always thinks and then calls get_order twice, in one token (max_tokens 1)
  const r = await startRedis();
  const s = await startServer(['--redis', r.url], { model: CALLS });
  try {
    const c = new OpenAI({ apiKey: 'x', baseURL: `${s.url}/v1`, maxRetries: 0 });
    const q = 'Where are orders 1 and 2?';
    const body = { model: 'fogline', messages: user(q), tools: CHAT_TOOLS, max_tokens: 1 };
    const ids = (calls) => calls?.map((x) => JSON.parse((x.function ?? x).arguments).order_id);
    for (const p of [{}, { parallel_tool_calls: true }, { parallel_tool_calls: null }]) {
      const all = await c.chat.completions.create({ ...body, ...p });
      assert.deepEqual(ids(all.choices[0].message.tool_calls), [1, 2], JSON.stringify(p));
    }
    const one = await c.chat.completions.create({ ...body, parallel_tool_calls: false });
    const m = one.choices[0].message;
    assert.deepEqual(ids(m.tool_calls), [1], JSON.stringify(one));
    assert.equal(m.tool_calls[0].index, 0);
    assert.equal(m.content, null, 'the dropped call is not content either');
    assert.equal(m.reasoning_content, 'Two orders to look up.');
    assert.equal(one.choices[0].finish_reason, 'tool_calls');
    // streamed: one tool_calls delta
    const stream = await c.chat.completions.create({ ...body, parallel_tool_calls: false, stream: true });
    const got = [];
    let fin;
    for await (const ch of stream)
      for (const x of ch.choices) {
        got.push(...(x.delta?.tool_calls ?? []));
        fin = x.finish_reason ?? fin;
        assert.ok(!x.delta?.content, JSON.stringify(x.delta));
      }
    assert.deepEqual(ids(got), [1]);
    assert.equal(fin, 'tool_calls');
    // n 2: each choice keeps its first
    const two = await c.chat.completions.create({ ...body, parallel_tool_calls: false, n: 2, temperature: 1 });
    assert.deepEqual(two.choices.map((ch) => ids(ch.message.tool_calls)), [[1], [1]]);
    // the Responses API takes it as chat does and says what it was asked
    const rq = { model: 'fogline', input: q, tools: TOOLS, max_output_tokens: 1 };
    const fc = (out) => ids(out.filter((it) => it.type === 'function_call'));
    const rall = await c.responses.create(rq);
    assert.equal(rall.parallel_tool_calls, true);
    assert.deepEqual(fc(rall.output), [1, 2]);
    const rone = await c.responses.create({ ...rq, parallel_tool_calls: false });
    assert.equal(rone.parallel_tool_calls, false);
    assert.deepEqual(fc(rone.output), [1]);
    const { events, final } = await streamed(c, { ...rq, parallel_tool_calls: false });
    assert.deepEqual(fc(final.output), [1]);
    assert.equal(events.filter((e) => e.type === 'response.function_call_arguments.done').length, 1);
    // the turn is stored as the client got it: one call, the id it was sent
    await connected(s);
    const before = (await metrics(s)).get('fogline_session_total', { outcome: 'written' }) ?? 0;
    const kept1 = await c.responses.create({ ...rq, parallel_tool_calls: false });
    await until(async () => (await metrics(s)).get('fogline_session_total', { outcome: 'written' }) === before + 1,
      5000, 'the turn stored');
    const rec = JSON.parse(await cli(r.port, ['GET', `fogline:session:${kept1.id}`]));
    const stored = JSON.parse(rec.messages.at(-1).tool_calls_text);
    assert.deepEqual(stored.map((x) => [x.id, x.function.arguments.order_id]),
      kept1.output.filter((it) => it.type === 'function_call').map((it) => [it.call_id, 1]));
    // the WebSocket: done carries the one call
    const ws = await connect(s);
    try {
      ws.send({ type: 'chat', id: 'p1', messages: user(q), tools: CHAT_TOOLS, max_tokens: 1, parallel_tool_calls: false });
      const done = (await ws.collect('p1', 60000)).find((f) => f.type === 'done');
      assert.deepEqual(ids(done.tool_calls), [1], JSON.stringify(done));
    } finally {
      ws.close();
    }
    // not a boolean: 400 naming it, on both routes
    for (const v of ['false', 0]) {
      const a = await fetch(`${s.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, parallel_tool_calls: v }) });
      assert.equal(a.status, 400);
      assert.deepEqual((await a.json()).error.param, 'parallel_tool_calls');
      const b = await fetch(`${s.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...rq, parallel_tool_calls: v }) });
      assert.equal(b.status, 400);
      const e = (await b.json()).error;
      assert.equal(e.param, 'parallel_tool_calls');
      assert.match(e.message, /'parallel_tool_calls' must be true or false/);
    }
  } finally {
    assert.equal(await s.stop(), 0, s.log());
  }
});

test('tools across turns: previous_response_id and a chat session keep the calls and their outputs', async () => {
  const r = await startRedis();
  const s = await startServer(['--redis', r.url], { model: THINK });
  try {
    await connected(s);
    const c = new OpenAI({ apiKey: 'x', baseURL: `${s.url}/v1`, maxRetries: 0 });
    const written = async (n) => until(async () =>
      (await metrics(s)).get('fogline_session_total', { outcome: 'written' }) === n, 5000, `${n} stored`);
    const q = 'Where is order 12?', out = '{"status": "shipped"}';
    // 1. a call
    const r1 = await c.responses.create({ model: 'fogline', input: q, tools: TOOLS, tool_choice: 'required',
      max_output_tokens: 160 });
    assert.equal(r1.store, true);
    const call = r1.output.find((it) => it.type === 'function_call');
    assert.ok(call, JSON.stringify(r1.output));
    await written(1);
    const kept = JSON.parse(await cli(r.port, ['GET', `fogline:session:${r1.id}`]));
    assert.deepEqual(kept.messages.map((m) => m.role), ['user', 'assistant']);
    const [stored] = JSON.parse(kept.messages[1].tool_calls_text);
    assert.deepEqual({ id: stored.id, name: stored.function.name, arguments: stored.function.arguments },
      { id: call.call_id, name: call.name, arguments: JSON.parse(call.arguments) });
    // 2. its output alone continues the conversation: the prompt is the whole of it, as chat
    //    completions renders it when the client sends every message (the call, its output)
    const msgs = [...user(q), { role: 'assistant', content: null, tool_calls: [{ id: call.call_id,
      type: 'function', function: { name: call.name, arguments: call.arguments } }] },
    { role: 'tool', tool_call_id: call.call_id, content: out }];
    const r2 = await c.responses.create({ model: 'fogline', tools: TOOLS, previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: out }] });
    const c2 = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: msgs });
    assert.equal(r2.usage.input_tokens, c2.usage.prompt_tokens, 'the prompt holds the call and its output');
    assert.equal(r2.output_text, c2.choices[0].message.content ?? '');
    await written(2);
    // the reply is kept as the client got it: the answer, not the reasoning before it
    assert.ok(r2.output.some((it) => it.type === 'reasoning'), 'test data: the model thinks');
    const kept2 = JSON.parse(await cli(r.port, ['GET', `fogline:session:${r2.id}`]));
    assert.deepEqual(kept2.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant']);
    assert.equal(kept2.messages[3].content, r2.output_text);
    // its input items: the question, the call (r1's output), the call's output
    const items = (await c.responses.inputItems.list(r2.id, { order: 'asc' })).data;
    assert.deepEqual(items.map((it) => it.type), ['message', 'function_call', 'function_call_output']);
    assert.equal(items[1].call_id, call.call_id);
    assert.equal(items[1].arguments, call.arguments);
    assert.equal(items[2].output, out);
    // 3. a question after it, without tools, streamed: the calls are still in the history
    const reply2 = c2.choices[0].message;
    const next = [...msgs, { role: 'assistant', content: reply2.content ?? '',
      ...(reply2.tool_calls ? { tool_calls: reply2.tool_calls } : {}) }, ...user('Thanks!')];
    const { final } = await streamed(c, { input: 'Thanks!', previous_response_id: r2.id });
    const c3 = await c.chat.completions.create({ model: 'fogline', messages: next });
    assert.equal(final.usage.input_tokens, c3.usage.prompt_tokens);
    assert.equal(final.output_text, c3.choices[0].message.content);
    // the same conversation as a fogline session on chat completions
    const t1 = await c.chat.completions.create({ model: 'fogline', messages: user(q), tools: CHAT_TOOLS,
      tool_choice: 'required', max_tokens: 160, session: 'tools-1' });
    const tc1 = t1.choices[0].message.tool_calls;
    assert.equal(tc1.length, 1, JSON.stringify(t1));
    await written(4);
    const t2 = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, session: 'tools-1',
      messages: [{ role: 'tool', tool_call_id: tc1[0].id, content: out }] });
    const full = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: [...user(q),
      { role: 'assistant', content: null, tool_calls: tc1 }, { role: 'tool', tool_call_id: tc1[0].id, content: out }] });
    assert.equal(t2.usage.prompt_tokens, full.usage.prompt_tokens);
    assert.equal(t2.choices[0].message.content, full.choices[0].message.content);
    assert.deepEqual(t2.choices[0].message.tool_calls?.map((x) => x.function),
      full.choices[0].message.tool_calls?.map((x) => x.function));
    // and on the WebSocket: done's calls are kept, the tool result alone continues
    const ws = await connect(s);
    try {
      ws.send({ type: 'chat', id: 'w1', session: 'tools-ws', messages: user(q), tools: CHAT_TOOLS,
        tool_choice: 'required', max_tokens: 160 });
      const d1 = (await ws.collect('w1', 60000)).at(-1);
      assert.equal(d1.tool_calls?.length, 1, JSON.stringify(d1));
      await written(6);
      ws.send({ type: 'chat', id: 'w2', session: 'tools-ws', tools: CHAT_TOOLS, max_tokens: 24,
        messages: [{ role: 'tool', tool_call_id: d1.tool_calls[0].id, content: out }] });
      const d2 = (await ws.collect('w2', 60000)).at(-1);
      assert.equal(d2.type, 'done', JSON.stringify(d2));
      assert.equal(d2.usage.history_messages, 2);
      const wfull = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, max_tokens: 24,
        messages: [...user(q), { role: 'assistant', content: null, tool_calls: d1.tool_calls },
          { role: 'tool', tool_call_id: d1.tool_calls[0].id, content: out }] });
      assert.equal(d2.usage.prompt_tokens, wfull.usage.prompt_tokens);
      // a client that sends the whole conversation back (the web page does) is not given the
      // stored turns again, whether it sends the raw reply (think block and all) or the answer
      for (const k of [0, 1]) {
        ws.send({ type: 'chat', id: `f1${k}`, session: `full-${k}`, messages: user('hi'), max_tokens: 2 });
        const raw = (await ws.collect(`f1${k}`, 60000)).filter((f) => f.type === 'commit').map((f) => f.text).join('');
        assert.ok(raw.startsWith('<think>') && raw.includes('</think>'), `test data: the reply thinks (${raw})`);
        await written(8 + 2 * k);
        const content = k ? raw.slice(raw.indexOf('</think>') + 8).replace(/^\n+/, '') : raw;
        const whole = [...user('hi'), { role: 'assistant', content }, ...user('more')];
        ws.send({ type: 'chat', id: `f2${k}`, session: `full-${k}`, messages: whole, max_tokens: 2 });
        const d = (await ws.collect(`f2${k}`, 60000)).at(-1);
        ws.send({ type: 'chat', id: `f3${k}`, messages: whole, max_tokens: 2 });
        const alone = (await ws.collect(`f3${k}`, 60000)).at(-1);
        assert.equal(d.usage.history_messages, 2, `content ${k}: ${JSON.stringify(d.usage)}`);
        assert.equal(d.usage.prompt_tokens, alone.usage.prompt_tokens, `content ${k}`);
        await written(9 + 2 * k);
      }
    } finally {
      ws.close();
    }
  } finally {
    assert.equal(await s.stop(), 0, s.log());
  }
});

test('a session past --max-prompt-tokens drops its oldest turns whole: a turn\'s calls and results go with it', async () => {
  const r = await startRedis();
  const a = await startServer(['--redis', r.url], { model: THINK });
  let b;
  try {
    await connected(a);
    const c = new OpenAI({ apiKey: 'x', baseURL: `${a.url}/v1`, maxRetries: 0 });
    const written = async (n) => until(async () =>
      (await metrics(a)).get('fogline_session_total', { outcome: 'written' }) === n, 5000, `${n} stored`);
    const count = async (messages) => (await (await fetch(`${a.url}/tokenize`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages, tools: CHAT_TOOLS }) })).json()).count;
    // turn 1 has five messages: a question, two calls, their two results, the answer
    const calls = [1, 2].map((k) => ({ id: `call_${k}`, type: 'function',
      function: { name: 'get_order', arguments: `{"order_id": ${k}}` } }));
    const turn1 = [...user('Where are orders 1 and 2?'), { role: 'assistant', content: null, tool_calls: calls },
      { role: 'tool', tool_call_id: 'call_1', content: '{"status": "shipped"}' },
      { role: 'tool', tool_call_id: 'call_2', content: '{"status": "lost"}' }];
    const t1 = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: turn1,
      session: 'drop-1', max_tokens: 24 });
    await written(1);
    const t2 = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: user('Thanks!'),
      session: 'drop-1', max_tokens: 24 });
    await written(2);
    const reply = (t) => ({ role: 'assistant', content: t.choices[0].message.content ?? '',
      ...(t.choices[0].message.tool_calls ? { tool_calls: t.choices[0].message.tool_calls } : {}) });
    const all = [...turn1, reply(t1), ...user('Thanks!'), reply(t2), ...user('Bye.')];
    const last = [...user('Thanks!'), reply(t2), ...user('Bye.')];
    const limit = await count(last);
    assert.ok(await count(all) > limit);
    // another server with room for the last turn only: turn 1 goes, all five messages
    b = await startServer(['--redis', r.url, '--max-prompt-tokens', String(limit)], { model: THINK });
    await connected(b);
    const cb = new OpenAI({ apiKey: 'x', baseURL: `${b.url}/v1`, maxRetries: 0 });
    const t3 = await cb.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: user('Bye.'),
      session: 'drop-1', max_tokens: 24 });
    const want = await c.chat.completions.create({ model: 'fogline', tools: CHAT_TOOLS, messages: last, max_tokens: 24 });
    assert.equal(t3.usage.prompt_tokens, limit);
    assert.equal(t3.choices[0].message.content, want.choices[0].message.content);
    // what is stored next starts at a user message too
    await until(async () => (await metrics(b)).get('fogline_session_total', { outcome: 'written' }) === 1, 5000, 'stored');
    const kept = JSON.parse(await cli(r.port, ['GET', 'fogline:session:drop-1']));
    assert.deepEqual(kept.messages.map((m) => m.role), ['user', 'assistant', 'user', 'assistant']);
  } finally {
    assert.equal(await a.stop(), 0, a.log());
    if (b) assert.equal(await b.stop(), 0, b.log());
  }
});

test('previous_response_id past --max-prompt-tokens: the request\'s instructions stay first, the oldest turns go', async () => {
  const r = await startRedis();
  const a = await startServer(['--redis', r.url]);
  let b;
  try {
    await connected(a);
    const ca = new OpenAI({ apiKey: 'x', baseURL: `${a.url}/v1`, maxRetries: 0 });
    const written = async (srv, n) => until(async () =>
      (await metrics(srv)).get('fogline_session_total', { outcome: 'written' }) === n, 5000, `${n} stored`);
    const q1 = 'Where is my order 48213?', q2 = 'How long does express shipping take?', q3 = 'Thanks!';
    const r1 = await ca.responses.create({ model: 'fogline', input: q1, instructions: 'You are the help desk.' });
    await written(a, 1);
    const r2 = await ca.responses.create({ model: 'fogline', input: q2, previous_response_id: r1.id });
    await written(a, 2);
    const sys = { role: 'system', content: 'Answer briefly.' };
    const last = [sys, ...user(q2), { role: 'assistant', content: r2.output_text }, ...user(q3)];
    const all = [sys, ...user(q1), { role: 'assistant', content: r1.output_text }, ...last.slice(1)];
    const count = async (messages) => (await (await fetch(`${a.url}/tokenize`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages }) })).json()).count;
    const limit = await count(last);
    assert.ok(await count(all) > limit);
    b = await startServer(['--redis', r.url, '--max-prompt-tokens', String(limit)]);
    await connected(b);
    const cb = new OpenAI({ apiKey: 'x', baseURL: `${b.url}/v1`, maxRetries: 0 });
    const r3 = await cb.responses.create({ model: 'fogline', input: q3, previous_response_id: r2.id,
      instructions: 'Answer briefly.' });
    const want = await ca.chat.completions.create({ model: 'fogline', temperature: 0, messages: last });
    assert.equal(r3.usage.input_tokens, limit);
    assert.equal(r3.output_text, want.choices[0].message.content);
  } finally {
    assert.equal(await a.stop(), 0, a.log());
    if (b) assert.equal(await b.stop(), 0, b.log());
  }
});
