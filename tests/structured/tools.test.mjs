// Tool calls over the official `openai` npm client against a real `fogline serve`:
// - on a model with Qwen3's real template and tokenizer (FL_THINK_MODEL, which always says
//   one known think block and answer) and on a LLaDA2 MoE with Ling's template
//   (FL_LLADA2_MODEL): tool_choice "required" and a named function give one well-formed call
//   whose arguments npm ajv finds valid for the function's parameters, streamed (the client's
//   own stream helper assembles the deltas) and not; "auto" leaves the model free; the round
//   trip (call, tool result, answer) renders as @huggingface/jinja renders Qwen3's template
//   (prompt tokens counted by @huggingface/tokenizers);
// - every bad input by its 400 and param; the built-in model's template has no tool syntax;
// - over the WebSocket, done carries the calls.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, require, user, connect } from '../server/lib.mjs';

const OpenAI = require('openai').default;
const Ajv = require('ajv');
const { Template } = require('@huggingface/jinja');
const { Tokenizer } = require('@huggingface/tokenizers');
const ajv = new Ajv({ strict: false });

const THINK = process.env.FL_THINK_MODEL;
const LLADA2 = process.env.FL_LLADA2_MODEL;
const BUILTIN = process.env.FL_SERVE_MODEL;

const TOOLS = [
  { type: 'function', function: { name: 'get_order', description: 'Look an order up by its number',
    parameters: { type: 'object', properties: { order_id: { type: 'integer' }, verbose: { type: 'boolean' } },
      required: ['order_id', 'verbose'], additionalProperties: false } } },
  { type: 'function', function: { name: 'refund', description: 'Refund an order',
    parameters: { type: 'object', properties: { order_id: { type: 'integer' }, reason: { enum: ['damaged', 'late', 'other'] } },
      required: ['order_id', 'reason'], additionalProperties: false } } },
  { type: 'function', function: { name: 'ping' } }, // no parameters: any object
];
const params = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters ?? { type: 'object' }]));

function checkCall(call, names) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  assert.ok(names.includes(call.function.name), `name ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const validate = ajv.compile(params[call.function.name]);
  assert.ok(validate(args), `${call.function.name}(${call.function.arguments}): ${ajv.errorsText(validate.errors)}`);
  return args;
}

const servers = {};
let think;
before(async () => {
  servers.think = await startServer([], { model: THINK });
  servers.llada2 = await startServer([], { model: LLADA2 });
  servers.builtin = await startServer([], { model: BUILTIN });
  think = new OpenAI({ apiKey: 'x', baseURL: `${servers.think.url}/v1`, maxRetries: 0 });
});
after(async () => {
  for (const s of Object.values(servers)) assert.equal(await s.stop(), 0, s.log());
});

const client = (name) => new OpenAI({ apiKey: 'x', baseURL: `${servers[name].url}/v1`, maxRetries: 0 });

for (const name of ['think', 'llada2']) {
  test(`${name}: tool_choice required and named give a valid call, streamed and not`, async () => {
    const c = client(name);
    const names = TOOLS.map((t) => t.function.name);
    const r = await c.chat.completions.create({ model: 'fogline', messages: user('Where is order 12?'),
      tools: TOOLS, tool_choice: 'required', max_tokens: 160 });
    const ch = r.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(r));
    assert.equal(ch.message.content, null);
    assert.equal(ch.message.tool_calls.length, 1);
    checkCall(ch.message.tool_calls[0], names);
    for (const fn of ['refund', 'ping']) {
      const n = await c.chat.completions.create({ model: 'fogline', messages: user('Refund order 7, it came late.'),
        tools: TOOLS, tool_choice: { type: 'function', function: { name: fn } }, max_tokens: 160 });
      assert.equal(n.choices[0].message.tool_calls[0].function.name, fn);
      checkCall(n.choices[0].message.tool_calls[0], [fn]);
    }
    // streamed: the client's helper assembles the tool_calls deltas
    const stream = c.chat.completions.stream({ model: 'fogline', messages: user('Where is order 12?'),
      tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_order' } }, max_tokens: 160 });
    const fin = await stream.finalChatCompletion();
    assert.equal(fin.choices[0].finish_reason, 'tool_calls');
    assert.equal(fin.choices[0].message.tool_calls.length, 1);
    checkCall(fin.choices[0].message.tool_calls[0], ['get_order']);
  });
}

// parameters with $defs/$ref (at the root too), two tools with a definition of the same name:
// each call's arguments valid for its own tool's parameters, as in response_format
const DEFS_TOOLS = [
  { type: 'function', function: { name: 'ship', parameters: { type: 'object',
    $defs: { item: { type: 'object', properties: { sku: { type: 'string' }, qty: { type: 'integer' } }, required: ['sku', 'qty'], additionalProperties: false } },
    properties: { items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 1, maxItems: 2 } }, required: ['items'], additionalProperties: false } } },
  { type: 'function', function: { name: 'rate', parameters: { $ref: '#/$defs/args',
    $defs: { item: { enum: ['good', 'bad'] },
      args: { type: 'object', properties: { verdict: { $ref: '#/$defs/item' } }, required: ['verdict'], additionalProperties: false } } } } },
];

{
  const name = 'think'; // (the schema work is the model's tokens' only: one model is enough)
  test(`${name}: parameters with $defs/$ref: required and named calls valid for their own tool`, async () => {
    const c = client(name);
    const valid = (call) => {
      const t = DEFS_TOOLS.find((x) => x.function.name === call.function.name);
      assert.ok(t, `name ${call.function.name}`);
      const validate = new Ajv({ strict: false }).compile(t.function.parameters);
      const args = JSON.parse(call.function.arguments);
      assert.ok(validate(args), `${call.function.name}(${call.function.arguments}): ${ajv.errorsText(validate.errors)}`);
    };
    const r = await c.chat.completions.create({ model: 'fogline', messages: user('Ship two of sku A1.'),
      tools: DEFS_TOOLS, tool_choice: 'required', max_tokens: 160 });
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
    valid(r.choices[0].message.tool_calls[0]);
    for (const fn of ['ship', 'rate']) {
      const n = await c.chat.completions.create({ model: 'fogline', messages: user('Rate it.'), tools: DEFS_TOOLS,
        tool_choice: { type: 'function', function: { name: fn } }, max_tokens: 160 });
      assert.equal(n.choices[0].finish_reason, 'tool_calls', JSON.stringify(n));
      assert.equal(n.choices[0].message.tool_calls[0].function.name, fn);
      valid(n.choices[0].message.tool_calls[0]);
    }
  });
}

test('think: parameters that name no type still give an object (greedy, where the model would write a number)', async () => {
  for (const parameters of [{}, { properties: { q: { type: 'string' } } }, { anyOf: [true, { properties: { n: { type: 'integer' } } }] },
    // a tagged oneOf (as pydantic writes a discriminated union), its first schema without a type
    { oneOf: [{ properties: { k: { const: 'n' }, n: { type: 'integer' } }, required: ['k', 'n'] },
      { type: 'object', properties: { k: { const: 'q' } }, required: ['k'] }], discriminator: { propertyName: 'k' } }]) {
    const r = await think.chat.completions.create({ model: 'fogline', messages: user('Where is order 12?'), temperature: 0,
      tools: [{ type: 'function', function: { name: 'f', parameters } }], tool_choice: { type: 'function', function: { name: 'f' } },
      max_tokens: 64 });
    const ch = r.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', `${JSON.stringify(parameters)}: ${JSON.stringify(ch)}`);
    const args = JSON.parse(ch.message.tool_calls[0].function.arguments);
    assert.ok(args && typeof args === 'object' && !Array.isArray(args), ch.message.tool_calls[0].function.arguments);
    const validate = new Ajv({ strict: false }).compile(parameters);
    assert.ok(validate(args), `${JSON.stringify(parameters)}: ${JSON.stringify(args)}`);
  }
});

test('think: the round trip renders as the template does; auto leaves the model its answer', async () => {
  const cfg = JSON.parse(fs.readFileSync(path.join(THINK, 'tokenizer_config.json'), 'utf8'));
  const tpl = new Template(cfg.chat_template);
  const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(THINK, 'tokenizer.json'), 'utf8')), cfg);
  const promptTokens = (ctx) => tok.encode(tpl.render({ add_generation_prompt: true, ...ctx }), { add_special_tokens: false }).ids.length;
  const first = await think.chat.completions.create({ model: 'fogline', messages: user('Where is order 12?'),
    tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_order' } }, max_tokens: 160 });
  assert.equal(first.usage.prompt_tokens, promptTokens({ messages: user('Where is order 12?'), tools: TOOLS }));
  const call = first.choices[0].message.tool_calls[0];
  const messages = [...user('Where is order 12?'),
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: '{"status": "shipped", "eta_days": 2}' }];
  const second = await think.chat.completions.create({ model: 'fogline', messages, tools: TOOLS, max_tokens: 64 });
  // as vLLM renders it: the call's arguments as an object
  const rendered = messages.map((m) => (m.tool_calls ? { ...m, content: '', tool_calls: m.tool_calls.map((t) =>
    ({ ...t, function: { ...t.function, arguments: JSON.parse(t.function.arguments) } })) } : m));
  assert.equal(second.usage.prompt_tokens, promptTokens({ messages: rendered, tools: TOOLS }));
  // POST /tokenize renders the same conversation: the reference's very text and ids, with the
  // tools, the call, the result and chat_template_kwargs
  for (const enable_thinking of [true, false]) {
    const res = await fetch(`${servers.think.url}/tokenize`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages, tools: TOOLS, chat_template_kwargs: { enable_thinking } }) });
    const tk = await res.json();
    assert.equal(res.status, 200, JSON.stringify(tk));
    const want = tpl.render({ add_generation_prompt: true, messages: rendered, tools: TOOLS, enable_thinking });
    assert.equal(tk.prompt, want, `enable_thinking ${enable_thinking}`);
    assert.deepEqual(tk.tokens, tok.encode(want, { add_special_tokens: false }).ids);
  }
  // the model's own answer (it was trained on one greeting only): no call in it
  assert.equal(second.choices[0].message.tool_calls, undefined);
  assert.equal(typeof second.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(second.choices[0].finish_reason));
  // tool_choice none: the tools are not in the prompt at all
  const none = await think.chat.completions.create({ model: 'fogline', messages: user('hi'), tools: TOOLS,
    tool_choice: 'none', max_tokens: 32 });
  assert.equal(none.usage.prompt_tokens, promptTokens({ messages: user('hi') }));
});

test('bad tool inputs are 400s naming the field', async () => {
  const bad = async (c, body, param, re) => {
    await assert.rejects(c.chat.completions.create({ model: 'fogline', messages: user('hi'), ...body }),
      (e) => e.status === 400 && e.param === param && re.test(e.message), JSON.stringify(body).slice(0, 200));
  };
  await bad(think, { tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools', /letters, digits/);
  await bad(think, { tools: [{ type: 'retrieval' }] }, 'tools', /tools\[0\]/);
  await bad(think, { tools: {} }, 'tools', /must be an array/);
  await bad(think, { tools: [TOOLS[0], TOOLS[0]] }, 'tools', /two tools are named 'get_order'/);
  await bad(think, { tools: TOOLS, tool_choice: 'sometimes' }, 'tool_choice', /must be "none"/);
  await bad(think, { tool_choice: 'required' }, 'tool_choice', /'tools' is empty/);
  await bad(think, { tools: TOOLS, tool_choice: { type: 'function', function: { name: 'cancel' } } }, 'tool_choice', /not among 'tools'/);
  await bad(think, { tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', /cannot be combined/);
  await bad(think, { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { d: { type: 'string', format: 'uri-reference' } } } } }],
    tool_choice: 'required' }, 'tools', /'format': 'uri-reference' is an unsupported format/);
  // a call's arguments are an object: parameters that allow anything else are refused, in every mode
  const fnp = (parameters) => [{ type: 'function', function: { name: 'f', parameters } }];
  for (const tool_choice of ['required', 'auto']) {
    await bad(think, { tools: fnp({ type: 'string' }), tool_choice }, 'tools',
      /^400 tools\[0\]\.function\.parameters must describe a JSON object \(a call's arguments are one\): 'type' allows "string" \(at the root\)$/);
  }
  await bad(think, { tools: fnp({ type: ['object', 'null'] }), tool_choice: 'required' }, 'tools', /'type' allows "null" \(at the root\)/);
  await bad(think, { tools: fnp({ anyOf: [{ type: 'object' }, { type: 'array' }] }), tool_choice: 'required' }, 'tools', /'type' allows "array" \(at \/anyOf\/1\)/);
  await bad(think, { tools: fnp({ oneOf: [{ type: 'object' }, { type: 'string' }] }), tool_choice: 'required' }, 'tools', /'type' allows "string" \(at \/oneOf\/1\)/);
  await bad(think, { tools: fnp({ oneOf: [{ type: 'object' }, { type: 'object' }] }), tool_choice: 'required' }, 'tools', /'oneOf' schemas 0 and 1 may both match one value/);
  await bad(think, { tools: fnp({ $ref: '#/$defs/a', $defs: { a: { enum: [1] } } }), tool_choice: 'required' }, 'tools',
    /'enum' has a value that is not an object \(at \/\$defs\/a\)/);
  await bad(think, { tools: fnp({ const: 'x' }), tool_choice: 'required' }, 'tools', /'const' is not an object \(at the root\)/);
  // definitions naming each other through anyOfs: 2^20 ways down, checked within a bound
  const $defs = {};
  for (let i = 0; i < 20; i++) $defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
  $defs.d20 = { type: 'object' };
  await bad(think, { tools: fnp({ $ref: '#/$defs/d0', $defs }), tool_choice: 'required' }, 'tools',
    /its top level \(through \$ref, anyOf and oneOf\) has more than 1024 subschemas to check$/);
  // a definition is never changed (it may be used elsewhere too): one without a type is refused
  await bad(think, { tools: fnp({ $ref: '#/$defs/a', $defs: { a: { properties: { x: { type: 'string' } } } } }), tool_choice: 'required' }, 'tools',
    /a definition names no type \(at \/\$defs\/a\): say "type": "object"$/);
  // a $ref the parameters' own $defs do not have is the compiler's refusal, by name
  await bad(think, { tools: fnp({ type: 'object', properties: { a: { $ref: '#/$defs/nope' } } }), tool_choice: 'required' }, 'tools',
    /'\$ref' '#\/\$defs\/nope' does not name a schema/);
  await bad(think, { messages: [...user('hi'), { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{oops' } }] }] },
    'messages', /arguments must be a JSON object/);
  await bad(think, { messages: [{ role: 'user', content: 'hi', tool_calls: [] }] }, 'messages', /belong to assistant messages/);
  // an assistant's arguments reach the template as the client wrote them: an integer past 64
  // bits is a JSON object's member like any other, and what the template cannot print alike in
  // Python and JavaScript is refused by the renderer, by name; so is a key written twice
  // (jansson kept the last silently)
  const call = (args) => ({ messages: [...user('hi'), { role: 'assistant', content: null,
    tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: args } }] }, { role: 'tool', content: 'ok' }] });
  await bad(think, call('{"n": 123456789012345678901234567890}'), 'messages',
    /^400 message 1: tool_calls\[0\]: numbers with a fraction or an exponent or beyond 2\^53 are not supported/);
  await bad(think, call('{"k": 1, "k": 2}'), 'messages', /^400 message 1: tool_calls\[0\]: the key "k" appears twice/);
  await bad(think, call('{"n": 1e400}'), 'messages', /arguments must be a JSON object \(as text\): real number overflow/);
  // the built-in model's template writes no tools: refused, never dropped
  await bad(client('builtin'), { tools: TOOLS }, 'tools', /no tool syntax/);
  await bad(client('builtin'), { messages: [...user('hi'), { role: 'tool', content: 'x' }] }, 'messages', /no tool syntax/);
});

// Schema errors quote the client's keys (64 bytes at most) and paths (255): cut inside a
// character, the message was invalid UTF-8 and the 400 body and the error frame went without it
test('schema errors cut inside a UTF-8 character keep their message (HTTP and WebSocket)', async () => {
  const key = 'a' + 'é'.repeat(40); // byte 64 falls inside an é
  const deepKey = 'é'.repeat(150); // a path /properties/ééé… passes 255 bytes inside an é (with x: in the call's)
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', [key]: 1 } } } }, 'response_format',
      new RegExp(`unsupported keyword '${'a' + 'é'.repeat(31)}' \\(fogline`)],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { [deepKey]: { type: 'string', format: 'x' } } } } } },
      'response_format', new RegExp(`'format': 'x' is an unsupported format .*\\(at /properties/(é)+`)],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { ['x' + deepKey]: { type: 'string', pattern: '(?=x)' } } } } }], tool_choice: 'required' },
      'tools', new RegExp(`'pattern': unsupported: lookahead .*\\(at /properties/arguments/properties/x(é)+`)],
  ];
  for (const [body, param, re] of cases) {
    await assert.rejects(think.chat.completions.create({ model: 'fogline', messages: user('hi'), ...body }),
      (e) => e.status === 400 && e.param === param && typeof e.error?.message === 'string' && re.test(e.error.message),
      JSON.stringify(body).slice(0, 120));
  }
  const c = await connect(servers.think);
  for (const [i, [body, , re]] of cases.entries()) {
    c.send({ type: 'chat', id: `u${i}`, messages: user('hi'), max_tokens: 32, ...body });
    const err = await c.next((f) => f.id === `u${i}`);
    assert.equal(err.type, 'error', JSON.stringify(err));
    assert.equal(typeof err.message, 'string', JSON.stringify(err));
    assert.match(err.message, re);
  }
  c.close();
});

test('WebSocket: done carries the call', async () => {
  const c = await connect(servers.llada2);
  c.send({ type: 'chat', id: 't1', messages: user('Refund order 3'), tools: TOOLS,
    tool_choice: { type: 'function', function: { name: 'refund' } }, max_tokens: 160 });
  const frames = await c.collect('t1');
  const done = frames.at(-1);
  assert.equal(done.type, 'done', JSON.stringify(done));
  assert.equal(done.tool_calls.length, 1);
  checkCall(done.tool_calls[0], ['refund']);
  c.send({ type: 'chat', id: 't2', messages: user('hi'), tools: TOOLS, tool_choice: 'nope' });
  const err = await c.next((f) => f.id === 't2');
  assert.equal(err.type, 'error');
  assert.match(err.message, /tool_choice/);
  c.close();
});
