// Allocation failures (docs/robustness.md): FOGLINE_TEST_FAIL_ALLOC=<site>:<nth>,... makes the
// nth allocation at a named site fail as malloc returning NULL would. Each test starts its own
// server with the failures it needs, so the counts start at 1 for it. Required every time: the
// client gets an end it can read (an error frame, an HTTP error with a JSON body, an SSE error
// event), never a hang or a cut frame; nothing is left running; the server goes on serving; and
// it exits 0 (under ASan: without a report, e.g. no use of a freed request).
//   - branches: a skeleton request whose branches cannot be made, over HTTP (plain and
//     streamed) and over the WebSocket;
//   - done_event / commit_event / draft_event: an engine event that cannot be copied;
//   - sse: an SSE event that cannot be appended to the response;
//   - ws_frame: a WebSocket frame that cannot be queued;
//   - tokenize: a /tokenize job, or its answer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, metrics, until, user, FOUR_QUESTIONS, require } from './lib.mjs';

const OpenAI = require('openai').default;
const SEQ = { policy: 'sequential', pipeline: false }; // one token per step: several drafts per block
const QUESTION = user('Where is my order 48213? Also, what are your store hours on Sunday?');

const text = (frames) => frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');

async function withServer(fail, fn) {
  const server = await startServer(['--max-seqs', '4'], { env: { FOGLINE_TEST_FAIL_ALLOC: fail } });
  try {
    await fn(server);
    await idle(server);
  } finally {
    const code = await server.stop();
    assert.equal(code, 0, `exit ${code}: ${server.log().split('\n').slice(-40).join('\n')}`);
  }
  assert.match(server.log(), /event=stopped requests_left=0/);
}

// Nothing running or waiting, no HTTP exchange holding a request, every KV page back.
async function idle(server) {
  let last;
  await until(async () => {
    const m = await metrics(server);
    last = { active: m.get('fogline_requests_active'), http: m.get('fogline_http_open'),
      used: m.get('fogline_kv_pages', { state: 'used' }) };
    return last.active === 0 && last.http === 0 && last.used === 0;
  }, 20000, 'the server to be idle').catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(last)}`); });
}

async function post(server, body) {
  return fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(30000), // the old code never answered: fail, do not hang
  });
}

// The events of an SSE body; each must be a whole "data: ..." event whose payload parses.
function sseEvents(body) {
  assert.ok(body.endsWith('\n\n'), `the stream ends with a whole event: ${JSON.stringify(body.slice(-80))}`);
  return body.slice(0, -2).split('\n\n').map((e) => {
    assert.match(e, /^data: /, `an SSE event: ${JSON.stringify(e)}`);
    const p = e.slice(6);
    return p === '[DONE]' ? p : JSON.parse(p); // throws on a cut event
  });
}

async function wsChat(c, id, extra = {}) {
  c.send({ type: 'chat', id, messages: QUESTION, temperature: 0, max_tokens: 48, ...extra });
  return c.collect(id, 30000);
}

test('branches that cannot be made: the HTTP and the WebSocket client get internal_error; the server goes on', async () => {
  await withServer('branches:1,branches:2,branches:3', async (server) => {
    // plain HTTP: the outline stage runs, then making its branches fails
    let res = await post(server, { messages: QUESTION, max_tokens: 48, parallel: { mode: 'skeleton' } });
    assert.equal(res.status, 500);
    assert.match(res.headers.get('content-type'), /application\/json/);
    let body = await res.json();
    assert.equal(body.error.code, 'internal_error', JSON.stringify(body));
    assert.match(body.error.message, /out of memory/);
    // streamed: nothing of the stream has gone out yet, so it is an HTTP error too
    res = await post(server, { messages: QUESTION, max_tokens: 48, stream: true, parallel: { mode: 'auto' } });
    assert.equal(res.status, 500);
    body = await res.json();
    assert.equal(body.error.code, 'internal_error', JSON.stringify(body));
    // WebSocket: the outline frame, then the request's error
    const c = await connect(server);
    const frames = await wsChat(c, 'sk', { parallel: { mode: 'skeleton' } });
    const last = frames.at(-1);
    assert.equal(last.type, 'error', JSON.stringify(frames.slice(-3)));
    assert.equal(last.code, 'internal_error');
    assert.ok(frames.some((f) => f.type === 'outline'), 'the outline came first');
    // the counts moved past the failures: the same requests now succeed on both transports
    const again = await wsChat(c, 'sk2', { parallel: { mode: 'skeleton' } });
    assert.equal(again.at(-1).type, 'done', JSON.stringify(again.at(-1)));
    assert.equal(again.at(-1).finish, 'stop');
    res = await post(server, { messages: QUESTION, max_tokens: 48, parallel: { mode: 'skeleton' } });
    assert.equal(res.status, 200);
    body = await res.json();
    assert.equal(body.choices[0].finish_reason, 'stop');
    const m = await metrics(server);
    assert.ok(m.get('fogline_errors_total', { code: 'internal_error' }) >= 3);
    c.close();
  });
});

test('a done that cannot be copied still ends the request: an internal_error, then the server goes on', async () => {
  await withServer('done_event:1,done_event:2', async (server) => {
    const c = await connect(server);
    const lost = await wsChat(c, 'a');
    assert.equal(lost.at(-1).type, 'error', JSON.stringify(lost.at(-1)));
    assert.equal(lost.at(-1).code, 'internal_error');
    assert.match(lost.at(-1).message, /out of memory/);
    // over HTTP the done carries the whole answer: a 500 with a JSON body
    const res = await post(server, { messages: QUESTION, max_tokens: 48, temperature: 0 });
    assert.equal(res.status, 500);
    const body = await res.json();
    assert.equal(body.error.code, 'internal_error', JSON.stringify(body));
    // every commit before the lost done went out: the same chat now gives the same text
    const ok = await wsChat(c, 'b');
    assert.equal(ok.at(-1).type, 'done');
    assert.equal(text(lost), text(ok));
    c.close();
  });
});

test('a commit that cannot be copied: no reply with a hole, an internal_error ends it; lost drafts cost nothing', async () => {
  const c0 = { text: null };
  // the reference: the same chat with nothing failing
  await withServer('', async (server) => {
    const c = await connect(server);
    const frames = await wsChat(c, 'ref', { messages: user(FOUR_QUESTIONS), max_tokens: 64, decoding: SEQ });
    assert.equal(frames.at(-1).type, 'done');
    assert.ok(frames.filter((f) => f.type === 'commit').length >= 3, 'several commits');
    c0.text = text(frames);
    c0.forwards = frames.at(-1).stats.forwards;
    c.close();
  });
  await withServer('commit_event:2', async (server) => {
    const c = await connect(server);
    const frames = await wsChat(c, 'a', { messages: user(FOUR_QUESTIONS), max_tokens: 64, decoding: SEQ });
    const commits = frames.filter((f) => f.type === 'commit');
    assert.equal(commits.length, 1, 'only the commit before the lost one');
    assert.ok(c0.text.startsWith(commits[0].text));
    assert.equal(frames.at(-1).type, 'error', JSON.stringify(frames.at(-1)));
    assert.equal(frames.at(-1).code, 'internal_error');
    // nothing of that request comes after its error, and the next chat is whole
    const next = await wsChat(c, 'b', { messages: user(FOUR_QUESTIONS), max_tokens: 64, decoding: SEQ });
    assert.equal(next.at(-1).type, 'done');
    assert.equal(text(next), c0.text);
    assert.equal(c.frames.filter((f) => f.id === 'a').length, frames.length);
    // the engine was asked to stop it at the lost commit, not left to decode to the end
    const line = await server.waitLog(/event=done req="a" .*finish=error/);
    const forwards = Number(line.match(/ forwards=(\d+)/)[1]);
    assert.ok(forwards < c0.forwards / 2, `${forwards} forwards; ${c0.forwards} for the whole reply`);
    c.close();
  });
  await withServer('draft_event:1,draft_event:2,draft_event:3', async (server) => {
    const c = await connect(server);
    const frames = await wsChat(c, 'a', { messages: user(FOUR_QUESTIONS), max_tokens: 64, decoding: SEQ });
    assert.equal(frames.at(-1).type, 'done', JSON.stringify(frames.at(-1)));
    assert.equal(text(frames), c0.text);
    c.close();
  });
});

test('an SSE event that cannot be appended is not sent cut: an error event ends the stream', async () => {
  // sse counts the events appended: 1-3 for the first stream (its third fails, the error event
  // that replaces it is not counted), 4-6 for the second (its third fails), then none fails
  await withServer('sse:3,sse:6', async (server) => {
    const body = { messages: user(FOUR_QUESTIONS), max_tokens: 64, temperature: 0, decoding: SEQ, stream: true };
    const res = await post(server, body);
    assert.equal(res.status, 200);
    const events = sseEvents(await res.text());
    // the role chunk, one content chunk, then (instead of the third event) the error
    assert.equal(events.length, 3, JSON.stringify(events));
    assert.equal(events[0].choices[0].delta.role, 'assistant');
    assert.ok(events[1].choices[0].delta.content.length > 0);
    assert.equal(events[2].error.code, 'internal_error', JSON.stringify(events[2]));
    // the official client reports the error instead of handing over a short reply
    const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
    let got = '';
    await assert.rejects(async () => {
      for await (const ch of await client.chat.completions.create({ model: 'fogline', ...body })) {
        got += ch.choices[0]?.delta?.content ?? '';
      }
    }, (e) => e instanceof OpenAI.APIError && /out of memory/.test(e.message));
    assert.equal(got, events[1].choices[0].delta.content);
    // the stream after them is whole
    const whole = sseEvents(await (await post(server, body)).text());
    assert.equal(whole.at(-1), '[DONE]');
    assert.ok(whole.slice(1, -1).map((e) => e.choices[0].delta.content ?? '').join('').startsWith(got));
  });
});

test('a WebSocket frame that cannot be made closes the connection (1011) instead of leaving a hole; the server goes on', async () => {
  // frame 1 is the hello; frame 3 is the chat's second frame (a draft or a commit)
  await withServer('ws_frame:3', async (server) => {
    const c = await connect(server);
    c.send({ type: 'chat', id: 'h', messages: QUESTION, temperature: 0, max_tokens: 48, decoding: SEQ });
    const info = await Promise.race([c.closed, new Promise((resolve, reject) => setTimeout(() =>
      reject(new Error('no close: the client is left waiting for a frame that never comes')), 30000).unref())]);
    assert.equal(info.code, 1011, JSON.stringify(info));
    assert.match(info.reason, /out of memory/);
    assert.match(server.log(), /event=ws_frame_lost/);
    // its request was cancelled (idle() in withServer checks nothing is left running), and a
    // new connection is served in full
    const c2 = await connect(server);
    const frames = await wsChat(c2, 'ok');
    assert.equal(frames.at(-1).type, 'done', JSON.stringify(frames.at(-1)));
    assert.equal(frames.at(-1).finish, 'stop');
    c2.close();
  });
});

test('a /tokenize job or answer that cannot be made: a 500 with its JSON body; the next one is whole', async () => {
  // the site's calls: the first request's job (1, fails), the second's job (2) and answer (3,
  // fails), the third's job and answer (4, 5)
  await withServer('tokenize:1,tokenize:3', async (server) => {
    const tok = async () => {
      const res = await fetch(`${server.url}/tokenize`, { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'hello there' }) });
      return { status: res.status, body: await res.json() };
    };
    const want = { status: 500, body: { error: { message: 'out of memory', type: 'server_error',
      param: null, code: 'internal_error' } } };
    assert.deepEqual(await tok(), want, 'the job');
    assert.deepEqual(await tok(), want, 'the answer');
    const ok = await tok();
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.count, ok.body.tokens.length);
    assert.ok(ok.body.count > 0);
  });
});
