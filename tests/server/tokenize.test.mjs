// POST /tokenize and POST /detokenize (docs/protocol.md), vLLM's shapes, checked against an
// independent reference: @huggingface/jinja rendering the model's own chat template and
// @huggingface/tokenizers tokenizing and decoding with its tokenizer.json. The counts agree
// with what chat and text completions report as usage.prompt_tokens; a prompt over
// --max-prompt-tokens is still counted (that is what a client asks /tokenize for); every bad
// input gets its status, code and param.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, require, MODEL } from './lib.mjs';

const OpenAI = require('openai').default;
const { Template } = require('@huggingface/jinja');
const { Tokenizer } = require('@huggingface/tokenizers');

const KEY = 'sk-tok-1';
const AUTH = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
const DIR = MODEL || fileURLToPath(new URL('../../engine/models/fogline-helpdesk', import.meta.url));
const cfg = JSON.parse(fs.readFileSync(path.join(DIR, 'tokenizer_config.json'), 'utf8'));
const tpl = new Template(cfg.chat_template);
const ref = new Tokenizer(JSON.parse(fs.readFileSync(path.join(DIR, 'tokenizer.json'), 'utf8')), cfg);
const refIds = (text) => ref.encode(text, { add_special_tokens: false }).ids;
const refText = (ids, skip) => (ids.length ? ref.decode(ids, { skip_special_tokens: skip }) : '');
const render = (messages, add = true) => tpl.render({ messages, add_generation_prompt: add });
const vocab = JSON.parse(fs.readFileSync(path.join(DIR, 'config.json'), 'utf8')).vocab_size;

let server;
let client;
before(async () => {
  server = await startServer(['--api-key', KEY, '--max-prompt-tokens', '96', '--max-tokens', '8']);
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

async function post(route, body, headers = AUTH) {
  const res = await fetch(`${server.url}${route}`, { method: 'POST', headers,
    body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* the test says what it wanted */ }
  return { status: res.status, json, text };
}

const CONVS = [
  [{ role: 'user', content: 'Where is my order 48213?' }],
  [{ role: 'system', content: 'You are a help desk.' }, { role: 'user', content: 'my password expired' },
    { role: 'assistant', content: 'I can help with that.' }, { role: 'user', content: 'thanks — 日本語 too? 🙂' }],
];
const TEXTS = ['Where is my order 48213? €', '<|im_start|>user\nhi<|im_end|>\n', '  spaces\tand\nlines  ',
  'ünïcödé and 表情 🙂', ''];

test('a prompt: the ids the reference tokenizer gives, special tokens matched; the count that completions use', async () => {
  for (const text of TEXTS) {
    const r = await post('/tokenize', { prompt: text, model: 'fogline' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.tokens, refIds(text), JSON.stringify(text));
    assert.equal(r.json.count, r.json.tokens.length);
    assert.equal(r.json.max_model_len, JSON.parse(fs.readFileSync(path.join(DIR, 'config.json'), 'utf8')).max_position_embeddings);
    assert.equal(r.json.prompt, undefined, 'a prompt is not echoed');
    assert.equal(r.json.token_strs, undefined, 'token_strs only when asked');
    if (!text) continue;
    const c = await client.completions.create({ model: 'fogline', prompt: text, max_tokens: 1 });
    assert.equal(c.usage.prompt_tokens, r.json.count, JSON.stringify(text));
  }
  // token_strs: the vocabulary's own strings, as the reference's model holds them
  const r = await post('/tokenize', { prompt: TEXTS[0], return_token_strs: true });
  assert.deepEqual(r.json.token_strs, r.json.tokens.map((id) => ref.id_to_token(id)));
  // a prompt longer than --max-prompt-tokens (96) is still counted; completions refuse it
  const long = 'order '.repeat(200);
  const lr = await post('/tokenize', { prompt: long });
  assert.equal(lr.status, 200, lr.text);
  assert.equal(lr.json.count, refIds(long).length);
  assert.ok(lr.json.count > 96, `${lr.json.count}`);
  await assert.rejects(client.completions.create({ model: 'fogline', prompt: long }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded');
});

test('messages: the chat template as Hugging Face renders it; the count chat completions report', async () => {
  for (const messages of CONVS) {
    for (const add of [true, false]) {
      const r = await post('/tokenize', { messages, ...(add ? {} : { add_generation_prompt: false }) });
      assert.equal(r.status, 200, r.text);
      const want = render(messages, add);
      assert.equal(r.json.prompt, want, `${messages.length} messages, add_generation_prompt ${add}`);
      assert.deepEqual(r.json.tokens, refIds(want));
      assert.equal(r.json.count, r.json.tokens.length);
    }
    const r = await post('/tokenize', { messages });
    const chat = await client.chat.completions.create({ model: 'fogline', messages, max_tokens: 1 });
    assert.equal(chat.usage.prompt_tokens, r.json.count);
    // the rendered prompt sent back as a text completion is the same prompt
    const c = await client.completions.create({ model: 'fogline', prompt: r.json.prompt, max_tokens: 1 });
    assert.equal(c.usage.prompt_tokens, r.json.count);
  }
});

test('detokenize: the reference decoder\'s text; a cut character is U+FFFD; special tokens kept or skipped', async () => {
  const cases = [...TEXTS.map(refIds), refIds(render(CONVS[1])), [0, 1, 2, vocab - 1]];
  for (const ids of cases) {
    const r = await post('/detokenize', { tokens: ids });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.prompt, refText(ids, false), JSON.stringify(ids));
    const s = await post('/detokenize', { tokens: ids, skip_special_tokens: true, model: 'fogline' });
    assert.equal(s.json.prompt, refText(ids, true), JSON.stringify(ids));
  }
  // the round trip, and the three bytes of '€' cut after the first
  const r = await post('/detokenize', { tokens: refIds('a €') });
  assert.equal(r.json.prompt, 'a €');
  const euro = refIds('€');
  assert.ok(euro.length > 1, 'test data: € is several byte tokens');
  const cut = await post('/detokenize', { tokens: euro.slice(0, 1) });
  assert.equal(cut.json.prompt, '\uFFFD');
  const special = refIds('<|im_start|>x');
  assert.equal((await post('/detokenize', { tokens: special, skip_special_tokens: true })).json.prompt, 'x');
});

test('every bad input: its status, code and param; the key, the method and the model checked', async () => {
  const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
  const msgs = CONVS[0];
  const cases = [
    ['/tokenize', '{"prompt":', 400, 'bad_json', null, /not valid JSON/],
    ['/tokenize', '[1]', 400, 'bad_request', null, /JSON object/],
    ['/tokenize', {}, 400, 'bad_request', 'prompt', /'prompt' \(a string\) or 'messages' is required/],
    ['/tokenize', { prompt: 'a', messages: msgs }, 400, 'bad_request', 'prompt', /not both/],
    ['/tokenize', { prompt: [1, 2] }, 400, 'bad_request', 'prompt', /must be a string/],
    ['/tokenize', { prompt: 'a\u0000b' }, 400, 'bad_json', null, /\\u0000 is not allowed/],
    ['/tokenize', { prompt: 'a', tools: [tool] }, 400, 'bad_request', 'tools', /applies to 'messages'/],
    ['/tokenize', { prompt: 'a', chat_template_kwargs: {} }, 400, 'bad_request', 'chat_template_kwargs', /applies to 'messages'/],
    ['/tokenize', { prompt: 'a', add_generation_prompt: false }, 400, 'bad_request', 'add_generation_prompt', /applies to 'messages'/],
    ['/tokenize', { prompt: 'a', return_token_strs: 1 }, 400, 'bad_request', 'return_token_strs', /true or false/],
    ['/tokenize', { prompt: 'a', add_special_tokens: 'no' }, 400, 'bad_request', 'add_special_tokens', /true or false/],
    ['/tokenize', { messages: msgs, add_generation_prompt: 'yes' }, 400, 'bad_request', 'add_generation_prompt', /true or false/],
    ['/tokenize', { messages: msgs, continue_final_message: true }, 400, 'bad_request', 'continue_final_message', /not supported/],
    ['/tokenize', { messages: msgs, session: 's1' }, 400, 'bad_request', 'session', /not taken by \/tokenize/],
    ['/tokenize', { messages: msgs, parallel: { mode: 'fanout', segments: ['a'] } }, 400, 'bad_request', 'parallel', /not taken/],
    ['/tokenize', { messages: [] }, 400, 'bad_request', 'messages', /messages/],
    ['/tokenize', { messages: [{ role: 'robot', content: 'x' }] }, 400, 'bad_request', 'messages', /role/],
    ['/tokenize', { messages: msgs, chat_template_kwargs: { x: 1 } }, 400, 'bad_request', 'chat_template_kwargs', /x/],
    ['/tokenize', { messages: msgs, tools: [tool] }, 400, 'bad_request', 'tools', /no tool syntax/],
    ['/tokenize', { prompt: 'a', model: 'gpt-4' }, 404, 'model_not_found', 'model', /does not exist/],
    ['/tokenize', { messages: msgs, model: 'gpt-4' }, 404, 'model_not_found', 'model', /does not exist/],
    ['/tokenize', { prompt: 'a', model: 7 }, 400, 'bad_request', 'model', /must be a string/],
    ['/detokenize', '{"tokens":', 400, 'bad_json', null, /not valid JSON/],
    ['/detokenize', '[1]', 400, 'bad_request', null, /JSON object/],
    ['/detokenize', {}, 400, 'bad_request', 'tokens', /is required/],
    ['/detokenize', { tokens: 'abc' }, 400, 'bad_request', 'tokens', /array of token ids/],
    ['/detokenize', { tokens: [1, 'a'] }, 400, 'bad_request', 'tokens', /tokens\[1\] must be an integer/],
    ['/detokenize', { tokens: [1.5] }, 400, 'bad_request', 'tokens', /tokens\[0\] must be an integer/],
    ['/detokenize', { tokens: [-1] }, 400, 'out_of_range', 'tokens', /tokens\[0\] is -1, outside the vocabulary/],
    ['/detokenize', { tokens: [5, vocab] }, 400, 'out_of_range', 'tokens', new RegExp(`tokens\\[1\\] is ${vocab}, outside the vocabulary \\(${vocab} ids\\)`)],
    ['/detokenize', { tokens: [1], skip_special_tokens: 1 }, 400, 'bad_request', 'skip_special_tokens', /true or false/],
    ['/detokenize', { tokens: [1], model: 'gpt-4' }, 404, 'model_not_found', 'model', /does not exist/],
    ['/detokenize', { tokens: [1], model: [] }, 400, 'bad_request', 'model', /must be a string/],
  ];
  for (const [route, body, status, code, param, msg] of cases) {
    const r = await post(route, body);
    const what = `${route} ${JSON.stringify(body).slice(0, 70)}`;
    assert.equal(r.status, status, `${what}: ${r.text}`);
    assert.equal(r.json?.error?.code, code, `${what}: ${r.text}`);
    assert.equal(r.json.error.param, param, what);
    assert.equal(r.json.error.type, status === 404 ? 'not_found_error' : 'invalid_request_error', what);
    assert.match(r.json.error.message, msg, what);
  }
  for (const route of ['/tokenize', '/detokenize']) {
    const noKey = await post(route, { prompt: 'a', tokens: [1] }, { 'content-type': 'application/json' });
    assert.equal(noKey.status, 401, noKey.text);
    assert.equal(noKey.json.error.code, 'invalid_api_key');
    const get = await fetch(`${server.url}${route}`, { headers: AUTH });
    assert.equal(get.status, 405);
    assert.equal(get.headers.get('allow'), 'POST');
    assert.equal((await get.json()).error.code, 'method_not_allowed');
  }
  // a body over --max-message is refused before it is read whole
  const big = await post('/tokenize', { prompt: 'x'.repeat(2 << 20) });
  assert.equal(big.status, 413, big.text.slice(0, 200));
  assert.equal(big.json.error.code, 'message_too_large');
  // and the server still answers
  assert.equal((await post('/tokenize', { prompt: 'hi' })).status, 200);
});
