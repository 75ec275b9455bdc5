// valgrind.serve: a short `fogline serve` session under valgrind memcheck, against the Release
// build (an ASan build cannot run under valgrind): the server starts under valgrind with a
// real redis-server attached, serves WebSocket chats (one with a session, several at once, one
// cancelled mid-reply, one from a client that vanishes), an OpenAI request (plain and
// streamed), garbage frames, then SIGTERM. It must exit 0 with no memcheck error and no
// definitely-lost block (--error-exitcode=1 --errors-for-leak-kinds=definite), and the log must
// say so. tests/valgrind/fogline.supp holds the only suppressions, each justified there.
//
// Environment: FL_BIN (the fogline binary), FL_SERVE_MODEL, FL_VALGRIND (valgrind),
// FL_VALGRIND_SUPP (the suppressions file), FL_REDIS_SERVER, FL_VALGRIND_KEEP=1 keeps the log.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL, connect, user, freePort, metrics, until } from '../server/lib.mjs';

const VALGRIND = process.env.FL_VALGRIND || 'valgrind';
const SUPP = process.env.FL_VALGRIND_SUPP || new URL('./fogline.supp', import.meta.url).pathname;
const REDIS = process.env.FL_REDIS_SERVER || 'redis-server';

const kill = [];
after(() => { for (const p of kill) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL'); });

test('fogline serve under valgrind memcheck: chats, cancel, OpenAI, SIGTERM: exit 0, no errors, no definite leaks', { timeout: 540000 }, async (t) => {
  const bin = process.env.FL_BIN;
  assert.ok(bin, 'FL_BIN is not set');
  try {
    execFileSync(VALGRIND, ['--version']);
  } catch {
    assert.fail(`valgrind not found (${VALGRIND}): install it (tests/setup.sh does)`);
  }
  // an ASan binary cannot run under valgrind: say so instead of failing obscurely
  const syms = execFileSync('nm', ['-D', bin], { encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.ok(!/__asan_init/.test(syms), `${bin} is a sanitizer build; valgrind needs the Release build`);

  const rport = await freePort();
  const redis = spawn(REDIS, ['--port', String(rport), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  kill.push(redis);
  let rout = '';
  redis.stdout.on('data', (d) => (rout += d));
  await until(() => /Ready to accept connections/.test(rout) || redis.exitCode !== null, 10000, 'redis-server');

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fl-valgrind-'));
  const vlog = path.join(dir, 'memcheck.log');
  const port = await freePort();
  const args = [
    '--error-exitcode=1', '--leak-check=full', '--errors-for-leak-kinds=definite', '--track-fds=no',
    `--suppressions=${SUPP}`, `--log-file=${vlog}`, '--num-callers=30',
    // valgrind runs one thread at a time; without a fair lock the engine thread can starve the
    // loop thread for seconds
    '--fair-sched=yes',
    bin, 'serve', '--port', String(port), ...(MODEL ? ['--model', MODEL] : []),
    // small and single-threaded: valgrind runs one thread at a time anyway
    '--threads', '1', '--max-seqs', '4', '--max-prompt-tokens', '256', '--max-tokens-limit', '64',
    '--max-tokens', '32', '--kv-pages', '64', '--drain-timeout', '60',
    // the stall clock counts the server's own delay too: 10 s under valgrind is a fraction
    // of a second of real work, and a starved loop would close the test's clients as "too slow"
    '--ws-stall-timeout', '300',
    '--redis', `redis://127.0.0.1:${rport}`, '--redis-timeout-ms', '5000', '--redis-connect-timeout-ms', '10000',
  ];
  // OPENBLAS_CORETYPE: valgrind's CPU has no AVX-512; pin OpenBLAS to kernels it emulates
  const env = { ...process.env, OPENBLAS_NUM_THREADS: '1', OPENBLAS_CORETYPE: 'Haswell' };
  const proc = spawn(VALGRIND, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  kill.push(proc);
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
  const vlogText = () => (fs.existsSync(vlog) ? fs.readFileSync(vlog, 'utf8') : '(no valgrind log)');
  const t0 = Date.now();
  await until(() => /event=listening/.test(out) || proc.exitCode !== null, 300000, 'fogline serve to listen under valgrind')
    .catch((e) => { throw new Error(`${e.message}\n${out}\n${vlogText()}`); });
  assert.equal(proc.exitCode, null, `exited at startup:\n${out}\n${vlogText()}`);
  t.diagnostic(`listening after ${((Date.now() - t0) / 1000).toFixed(1)} s under valgrind`);
  const server = { url: `http://127.0.0.1:${port}`, wsUrl: `ws://127.0.0.1:${port}/ws` };
  await until(async () => (await metrics(server)).get('fogline_redis_connected') === 1, 60000, 'Redis connected');

  const MS = 240000;
  const text = (frames) => frames.filter((f) => f.type === 'commit').map((f) => f.text).join('');
  const c = await connect(server);
  // a chat with a session (Redis GET, MGET, page writes, session SET), then its second turn
  c.send({ type: 'chat', id: 's1', session: 'vg', messages: user('Where is my order 48213?'), max_tokens: 24 });
  const s1 = await c.collect('s1', MS);
  assert.equal(s1.at(-1).type, 'done', JSON.stringify(s1.at(-1)));
  c.send({ type: 'chat', id: 's2', session: 'vg', messages: user('Can you cancel it?'), max_tokens: 16 });
  const s2 = await c.collect('s2', MS);
  assert.equal(s2.at(-1).type, 'done', JSON.stringify(s2.at(-1)));
  assert.ok(text(s1).length > 0);
  // two at once, one of them cancelled mid-reply
  c.send({ type: 'chat', id: 'a', messages: user('I want to return my blender.'), max_tokens: 32 });
  c.send({ type: 'chat', id: 'x', messages: user('Is the tablet in stock?'), max_tokens: 64,
           decoding: { policy: 'sequential', pipeline: false } });
  await c.next((f) => f.id === 'x' && f.type === 'draft', MS);
  c.send({ type: 'cancel', id: 'x' });
  const x = await c.collect('x', MS);
  const a = await c.collect('a', MS);
  assert.equal(a.at(-1).type, 'done');
  assert.equal(x.at(-1).type, 'done');
  // garbage: bad JSON, a binary frame, an unknown type (each answered; the connection stays)
  c.send('{"type":');
  c.send(Buffer.from([1, 2, 3]));
  c.send({ type: 'nope' });
  for (const code of ['bad_json', 'binary_not_supported', 'unknown_type']) {
    await c.next((f) => f.type === 'error' && f.code === code, MS);
  }
  // a client that vanishes mid-reply
  const v = await connect(server);
  v.send({ type: 'chat', id: 'v', messages: user('My package arrived damaged.'), max_tokens: 64,
           decoding: { policy: 'sequential', pipeline: false } });
  await v.next((f) => f.id === 'v' && f.type === 'draft', MS);
  v.ws.terminate();
  // OpenAI: plain, then streamed
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: user('Where is my order 48213?'), max_tokens: 16 }),
  });
  assert.equal(res.status, 200);
  assert.equal((await res.json()).object, 'chat.completion');
  const sse = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: user('hello'), max_tokens: 16, stream: true }),
  });
  assert.equal(sse.status, 200);
  assert.match(await sse.text(), /data: \[DONE\]/);
  c.close();
  await c.closed;

  // SIGTERM: a clean drain, exit 0 (valgrind's own exit code is 1 on any error)
  proc.kill('SIGTERM');
  let timer;
  const code = await Promise.race([exited, new Promise((r) => { timer = setTimeout(() => r('timeout'), 180000); })]);
  clearTimeout(timer);
  const log = vlogText();
  if (process.env.FL_VALGRIND_KEEP) t.diagnostic(`valgrind log: ${vlog}`);
  else fs.rmSync(dir, { recursive: true, force: true });
  redis.kill('SIGKILL');
  assert.equal(code, 0, `exit ${code}\n--- server ---\n${out.split('\n').slice(-30).join('\n')}\n--- valgrind ---\n${log}`);
  assert.match(out, /event=stopped requests_left=0/);
  assert.match(log, /ERROR SUMMARY: 0 errors from 0 contexts/, log);
  const lost = /definitely lost: ([\d,]+) bytes/.exec(log);
  assert.ok(!lost || lost[1] === '0', `definitely lost: ${lost?.[1]} bytes\n${log}`);
  const sum = (re) => (re.exec(log)?.[1] ?? '0');
  t.diagnostic(`total ${((Date.now() - t0) / 1000).toFixed(0)} s; ${sum(/total heap usage: (.*)/)}; ` +
    `possibly lost ${sum(/possibly lost: ([\d,]+ bytes)/)}, still reachable ${sum(/still reachable: ([\d,]+ bytes)/)}`);
});
