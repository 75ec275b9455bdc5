// Backpressure: a client that never reads must not slow the others or grow the server's
// memory without bound. Its drafts coalesce while its socket is full, and once a frame has
// waited --ws-stall-timeout for it, it is closed with 1008 and a reason and its requests are
// cancelled. A small --ws-sndbuf makes its socket fill after little output.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, connect, user, metrics, until } from './lib.mjs';

let server;

before(async () => {
  server = await startServer(['--ws-stall-timeout', '3', '--ws-sndbuf', '4096', '--max-conn-requests', '8']);
});

after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

test('a client that never reads is closed with a reason; another is served meanwhile', async () => {
  const m0 = await metrics(server);
  const slow = await connect(server);
  slow.ws.pause(); // stop reading: the kernel buffers fill, then the server's queue
  // pongs are never dropped: enough of them fill the socket's buffers; the chats' drafts then
  // wait in the server's queue, where newer drafts of a block replace older ones
  for (let i = 0; i < 8000; i++) slow.send({ type: 'ping', id: `p${i}` });
  for (let i = 0; i < 8; i++)
    slow.send({ type: 'chat', id: `s${i}`, messages: user(`question ${i} about my invoice and my order`),
                max_tokens: 64, decoding: { policy: 'sequential', pipeline: true, max_blocks: 4 } });
  const fast = await connect(server);
  for (let round = 0; round < 3; round++) {
    const t0 = Date.now();
    fast.send({ type: 'chat', id: `f${round}`, messages: user('where is my parcel'), max_tokens: 24 });
    const fr = await fast.collect(`f${round}`);
    assert.equal(fr.at(-1).type, 'done');
    assert.ok(Date.now() - t0 < 15000, 'the other client is served in reasonable time');
  }
  await until(async () => (await metrics(server)).get('fogline_ws_slow_closed_total') > m0.get('fogline_ws_slow_closed_total'),
              20000, 'the slow client to be closed');
  const m1 = await metrics(server);
  assert.ok(m1.get('fogline_drafts_coalesced_total') > m0.get('fogline_drafts_coalesced_total'),
            'drafts coalesced while the client did not read');
  await server.waitLog(/event=slow_client/);
  slow.ws.resume(); // now it reads what was buffered, then the close
  const closed = await slow.closed;
  assert.equal(closed.code, 1008);
  assert.match(closed.reason, /too slow/);
  // its requests were cancelled and the server is idle again
  await until(async () => {
    const m = await metrics(server);
    return m.get('fogline_requests_active') === 0 && m.get('fogline_sequences_running') === 0;
  }, 10000, 'the slow client\'s requests to be cancelled');
  const fr = await fast.collect((fast.send({ type: 'chat', id: 'after', messages: user('hi'), max_tokens: 8 }), 'after'));
  assert.equal(fr.at(-1).type, 'done');
  fast.close();
});
