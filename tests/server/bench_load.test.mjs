// `fogline bench load` (server/bench/bench_load.c), the C load generator the GPU script runs
// against `fogline serve --device cuda`: its counts are checked against the server's own
// /metrics (chats finished by outcome, reply tokens), its error kinds are provoked one by one
// (error frames, a server killed with chats running, nothing listening, a server that never
// answers) and its bad flags get their one-line errors. Counts only: the run's speed is never
// asserted.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startServer, freePort, metrics, until, BIN } from './lib.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'fl-bench-load-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

// Runs `fogline bench load ARGS` to its end: { code, out, err, json } (json: the --json file).
function load(args, { json = true } = {}) {
  const jf = path.join(tmp, `load-${Math.random().toString(36).slice(2)}.json`);
  const argv = ['bench', 'load', ...args, ...(json ? ['--json', jf] : [])];
  return new Promise((resolve) => {
    const p = spawn(BIN, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('close', (code) => {
      const j = json && fs.existsSync(jf) ? JSON.parse(fs.readFileSync(jf, 'utf8')) : null;
      resolve({ code, out, err, json: j, proc: p });
    });
  });
}

let server;
before(async () => { server = await startServer(['--threads', '1']); });
after(async () => { assert.equal(await server.stop(), 0, server.log()); });

const finished = (m) => m.get('fogline_requests_total', { outcome: 'stop' }) + m.get('fogline_requests_total', { outcome: 'length' });

test('a fixed number of chats: every count agrees with the server\'s metrics', async () => {
  const m0 = await metrics(server);
  const r = await load(['--url', server.wsUrl, '--clients', '4', '--chats', '13', '--max-tokens', '16']);
  assert.equal(r.code, 0, r.err);
  const m1 = await metrics(server);
  const j = r.json;
  assert.equal(j.chats_done, 13);
  assert.equal(j.errors, 0);
  assert.deepEqual(j.error_kinds, { connect: 0, frames: 0, closes: 0, unfinished: 0, other: 0 });
  assert.equal(finished(m1) - finished(m0), 13, 'the server finished as many chats');
  assert.equal(j.reply_tokens, m1.get('fogline_tokens_total', { kind: 'reply' }) - m0.get('fogline_tokens_total', { kind: 'reply' }),
    'reply tokens: the usage the client summed is what the server counted');
  assert.equal(j.finish.stop + j.finish.length, 13);
  assert.equal(j.finish.length, m1.get('fogline_requests_total', { outcome: 'length' }) - m0.get('fogline_requests_total', { outcome: 'length' }));
  assert.equal(j.first_draft.count, 13, 'one first draft per chat');
  assert.ok(j.first_draft.p50_s > 0 && j.first_draft.p99_s >= j.first_draft.p50_s);
  assert.ok(j.first_reply.length > 0, 'the first chat\'s committed text');
  assert.match(r.out, /\| 13 in [0-9.]+ s \| 0 \|/);
  assert.equal(m1.get('fogline_ws_connections'), 0, 'every client closed its connection');
});

test('a duration: chats start until it ends, then every one finishes', async () => {
  const m0 = await metrics(server);
  const r = await load(['--url', server.wsUrl, '--clients', '3', '--duration', '0.5', '--max-tokens', '8']);
  assert.equal(r.code, 0, r.err);
  const m1 = await metrics(server);
  assert.ok(r.json.chats_done >= 3, `each client ran at least one chat (${r.json.chats_done})`);
  assert.equal(finished(m1) - finished(m0), r.json.chats_done);
});

test('error frames are errors: each chat refused counts, and the exit status says so', async () => {
  const r = await load(['--url', server.wsUrl, '--clients', '2', '--chats', '3', '--max-tokens', '5000']);
  assert.equal(r.code, 1);
  assert.equal(r.json.chats_done, 0);
  assert.equal(r.json.error_kinds.frames, 3);
  assert.equal(r.json.errors, 3);
  assert.match(r.json.first_error, /out_of_range: 'max_tokens' must be in \[1, 1024\], got 5000/);
  assert.match(r.err, /^fogline bench load: 3 errors; first: error frame out_of_range/m);
});

test('a server that dies with chats running: unexpected closes and unfinished chats', async () => {
  const held = await startServer(['--threads', '1'], { hold: true });
  const run = load(['--url', held.wsUrl, '--clients', '2', '--chats', '2', '--max-tokens', '8']);
  // both chats reached the engine, which runs no forward while held: neither can finish
  await until(async () => (await metrics(held)).get('fogline_requests_active') === 2, 30000, 'two chats in the engine');
  held.proc.kill('SIGKILL');
  await held.exited;
  const r = await run;
  assert.equal(r.code, 1);
  assert.equal(r.json.chats_done, 0);
  assert.equal(r.json.error_kinds.closes, 2);
  assert.equal(r.json.error_kinds.unfinished, 2);
  assert.equal(r.json.errors, 4);
});

test('nothing listening: one line, exit 1', async () => {
  const port = await freePort();
  const r = await load(['--url', `ws://127.0.0.1:${port}/ws`, '--clients', '2', '--chats', '2']);
  assert.equal(r.code, 1);
  assert.match(r.err, new RegExp(`^fogline bench load: no connection to ws://127.0.0.1:${port}/ws succeeded \\(could not connect: .+\\)\\n$`));
  assert.equal(r.json, null, 'no figures without a connection');
});

test('--api-key: a server that wants a key gets it in the handshake; without it every chat is refused', async () => {
  const keyed = await startServer(['--threads', '1', '--api-key', 'k-123']);
  try {
    let r = await load(['--url', keyed.wsUrl, '--clients', '2', '--chats', '3', '--max-tokens', '8', '--api-key', 'k-123']);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.json.chats_done, 3);
    r = await load(['--url', keyed.wsUrl, '--clients', '1', '--chats', '1', '--max-tokens', '8']);
    assert.equal(r.code, 1);
    assert.equal(r.json.chats_done, 0);
    assert.match(r.json.first_error, /^error frame unauthorized: /);
  } finally {
    assert.equal(await keyed.stop(), 0, keyed.log());
  }
});

test('a server that never answers the upgrade: --timeout ends the run, the clients count as errors', async () => {
  const silent = net.createServer(() => {}); // accepts, never answers
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  try {
    const r = await load(['--url', `ws://127.0.0.1:${silent.address().port}/ws`, '--clients', '2', '--chats', '2', '--timeout', '1']);
    assert.equal(r.code, 1);
    assert.match(r.err, /^fogline bench load: no connection to .* succeeded \(connections without a hello after --timeout\)\n$/);
  } finally {
    silent.close();
  }
});

test('bad flags: one line each, exit 2; a bad prompts file: exit 1', async () => {
  const bad = [
    [['--clients', '0'], /--clients wants a number in 1\.\.4096, got '0'/],
    [['--clients', '5000'], /--clients wants a number in 1\.\.4096, got '5000'/],
    [['--chats', '-1'], /--chats wants a number in 0\.\.1000000, got '-1'/],
    [['--duration', '0'], /--duration wants seconds in \(0, 86400\], got '0'/],
    [['--timeout', 'x'], /--timeout wants seconds in \(0, 86400\], got 'x'/],
    [['--url', 'http://127.0.0.1:8080/ws'], /--url must start with ws:\/\/ \(wss is not supported\), got 'http:\/\/127.0.0.1:8080\/ws'/],
    [['--url', 'ws://127.0.0.1:99999/ws'], /--url has a bad port: 'ws:\/\/127.0.0.1:99999\/ws'/],
    [['--url', 'ws:///ws'], /--url has no host: 'ws:\/\/\/ws'/],
    [['--api-key', ''], /--api-key wants 1\.\.512 characters/],
    [['--bogus'], /unknown or incomplete option '--bogus'/],
    [['extra'], /unexpected argument 'extra'/],
  ];
  for (const [args, re] of bad) {
    const r = await load(args, { json: false });
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, new RegExp('^fogline bench load: ' + re.source + '\\n$'), args.join(' '));
  }
  const notJson = path.join(tmp, 'bad.json');
  fs.writeFileSync(notJson, '[{"messages": [{"role": "user", "content": "hi"}]}, {"text": "no messages"}]');
  let r = await load(['--url', server.wsUrl, '--prompts', notJson], { json: false });
  assert.equal(r.code, 1);
  assert.match(r.err, /^fogline bench load: .*bad\.json: item 1 has no "messages" array\n$/);
  r = await load(['--url', server.wsUrl, '--prompts', path.join(tmp, 'missing.json')], { json: false });
  assert.equal(r.code, 1);
  assert.match(r.err, /^fogline bench load: .*missing\.json: unable to open/);
});
