// Backpressure: a client that never reads must not slow the others or grow the server's
// memory without bound. Its drafts coalesce while its socket is full, and once a frame has
// waited --ws-stall-timeout for it, it is closed with 1008 and a reason and its requests are
// cancelled. A small --ws-sndbuf makes its socket fill after little output.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, user, metrics, until } from './lib.mjs';

// Two servers: one whose stall timeout cannot expire during the test (the other client is
// served while the slow one is stalled, not merely within some number of seconds), and one
// with a one-second stall timeout (the slow client is closed).
let server;
let stalling;

before(async () => {
  server = await startServer(['--ws-stall-timeout', '600', '--ws-sndbuf', '4096', '--max-conn-requests', '8']);
  stalling = await startServer(['--ws-stall-timeout', '1', '--ws-sndbuf', '4096', '--max-conn-requests', '8']);
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
  assert.equal(await stalling.stop(), 0, stalling.log());
});

// A client that stops reading: pongs are never dropped, so enough of them fill the socket's
// buffers; its chats' drafts then wait in the server's queue, where newer drafts of a block
// replace older ones.
async function stopReading(s) {
  const slow = await connect(s);
  slow.ws.pause(); // stop reading: the kernel buffers fill, then the server's queue
  for (let i = 0; i < 8000; i++) slow.send({ type: 'ping', id: `p${i}` });
  for (let i = 0; i < 8; i++)
    slow.send({ type: 'chat', id: `s${i}`, messages: user(`question ${i} about my invoice and my order`),
                max_tokens: 64, decoding: { policy: 'sequential', pipeline: true, max_blocks: 4 } });
  return slow;
}

async function idle(s, what) {
  await until(async () => {
    const m = await metrics(s);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_sequences_running') === 0;
  }, 10000, what);
}

test('a client that never reads does not hold up another; its drafts coalesce', async () => {
  const m0 = await metrics(server);
  const slow = await stopReading(server);
  const fast = await connect(server);
  for (let round = 0; round < 3; round++) {
    fast.send({ type: 'chat', id: `f${round}`, messages: user('where is my parcel'), max_tokens: 24 });
    const fr = await fast.collect(`f${round}`);
    assert.equal(fr.at(-1).type, 'done');
  }
  // served while the slow client was stalled and still connected
  const m1 = await metrics(server);
  assert.equal(m1.get('fogline_ws_slow_closed_total'), m0.get('fogline_ws_slow_closed_total'), 'the slow client is still open');
  assert.equal(slow.closeInfo, null);
  await until(async () => (await metrics(server)).get('fogline_drafts_coalesced_total') > m0.get('fogline_drafts_coalesced_total'),
              20000, 'drafts to coalesce while the client does not read');
  slow.ws.terminate();
  await idle(server, 'the slow client\'s requests to be cancelled');
  fast.close();
});

test('a client that never reads is closed with 1008 and a reason; its requests are cancelled', async () => {
  const m0 = await metrics(stalling);
  const slow = await stopReading(stalling);
  await until(async () => (await metrics(stalling)).get('fogline_ws_slow_closed_total') > m0.get('fogline_ws_slow_closed_total'),
              20000, 'the slow client to be closed');
  await stalling.waitLog(/event=slow_client/);
  slow.ws.resume(); // now it reads what was buffered, then the close
  const closed = await slow.closed;
  assert.equal(closed.code, 1008);
  assert.match(closed.reason, /too slow/);
  // its requests were cancelled and the server is idle again
  await idle(stalling, 'the slow client\'s requests to be cancelled');
  const fast = await connect(stalling);
  const fr = await fast.collect((fast.send({ type: 'chat', id: 'after', messages: user('hi'), max_tokens: 8 }), 'after'));
  assert.equal(fr.at(-1).type, 'done');
  fast.close();
});
