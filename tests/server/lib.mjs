// Helpers for the `fogline serve` tests: start a real server process on a free loopback port,
// talk to it with the npm `ws` client, read /metrics with a real Prometheus text parser.
//
// Environment: FL_BIN (the fogline binary), FL_SERVE_MODEL (the model directory; the built-in
// model by default, as the binary knows it).
import { spawn } from 'node:child_process';
import { after } from 'node:test';
import net from 'node:net';
import { createRequire } from 'node:module';

// the npm packages live in tests/node (one package.json for every node test)
export const require = createRequire(new URL('../node/package.json', import.meta.url));
const WebSocket = require('ws');
const parsePrometheus = require('parse-prometheus-text-format');

export const BIN = process.env.FL_BIN;
export const MODEL = process.env.FL_SERVE_MODEL || '';

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// Starts `fogline serve` and resolves once it logs event=listening. Retries on a port taken
// between freePort() and the bind. The returned object collects stderr lines.
// hold: true enables the engine hold (FOGLINE_TEST_HOLD=1) and starts the server held: no
// forward runs until the test calls step() or release().
export async function startServer(args = [], { env = {}, model = MODEL, tries = 3, hold = false } = {}) {
  const bin = process.env.FL_BIN;
  if (!bin) throw new Error('FL_BIN is not set');
  for (let t = 0; ; t++) {
    const port = await freePort();
    const argv = ['serve', '--port', String(port), ...(model ? ['--model', model] : []), ...args];
    const proc = spawn(bin, argv, { env: { ...process.env, ...(hold ? { FOGLINE_TEST_HOLD: '1' } : {}), ...env },
                                    stdio: ['ignore', 'pipe', 'pipe'] });
    const server = makeHandle(proc, port);
    try {
      await server.waitLog(/event=listening/, 60000);
    } catch (e) {
      const code = await server.exited;
      if (t + 1 < tries && /port in use/.test(server.log())) continue;
      throw new Error(`fogline serve did not start (exit ${code}): ${server.log()}`);
    }
    if (hold) await server.hold();
    return server;
  }
}

// A server that a failed test left running (its own shutdown skipped) is killed 30 s after the
// file's tests are over, so the failure reports fast instead of keeping node alive until
// ctest's timeout. The timer is unref'd: a clean run exits at once, and the files' own after
// hooks (which stop their servers and check the exit code) run first.
const live = new Set();
after(() => {
  setTimeout(() => {
    for (const p of live) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  }, 30000).unref();
});

// Output of a child process, line by line, with waiting for a line.
export function lineLog(proc, name) {
  const lines = [];
  const waiters = [];
  let buf = '';
  const onData = (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.push(line);
      if (process.env.FL_TEST_VERBOSE) process.stderr.write(`[${name}] ${line}\n`);
      for (const w of [...waiters]) if (w.re.test(line)) w.done(line);
    }
  };
  proc.stdout?.on('data', onData);
  proc.stderr?.on('data', onData);
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
  return {
    lines,
    exited,
    text: () => lines.join('\n'),
    wait(re, ms) {
      const hit = lines.find((l) => re.test(l));
      if (hit) return Promise.resolve(hit);
      return new Promise((resolve, reject) => {
        const w = {
          re,
          done: (l) => { clearTimeout(timer); waiters.splice(waiters.indexOf(w), 1); resolve(l); },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          reject(new Error(`${name}: timed out waiting for ${re}`));
        }, ms);
        waiters.push(w);
        // 'exit' can come before the last output is read: give it a moment
        exited.then((code) => setTimeout(() => {
          if (!waiters.includes(w)) return;
          waiters.splice(waiters.indexOf(w), 1);
          clearTimeout(timer);
          reject(new Error(`${name} exited (${code}) before ${re}`));
        }, 50));
      });
    },
  };
}

function makeHandle(proc, port) {
  live.add(proc);
  proc.on('exit', () => live.delete(proc));
  const out = lineLog(proc, 'server');
  const { lines, exited } = out;
  let acks = 0; // test_hold acknowledgements asked for
  const h = {
    proc,
    port,
    url: `http://127.0.0.1:${port}`,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    exited,
    lines,
    log: out.text,
    waitLog: (re, ms = 10000) => out.wait(re, ms),
    // The engine hold (a server started with { hold: true }; docs/robustness.md): hold() and
    // release() stop and restart the engine's forwards, step() runs exactly one while held.
    // Each resolves with the server's acknowledgement, logged once no forward runs and the
    // events of the last one have been handed to their clients: { held, forwards, running,
    // queued } (the engine's counters at that point).
    held: false,
    hold: () => h.testControl('SIGUSR2', true),
    release: () => h.testControl('SIGUSR2', false),
    step: () => h.testControl('SIGUSR1', true),
    async testControl(sig, want) {
      if (sig === 'SIGUSR2' && h.held === want) throw new Error(`the engine is already ${want ? 'held' : 'released'}`);
      if (sig === 'SIGUSR1' && !h.held) throw new Error('step() needs a held engine');
      const n = ++acks;
      proc.kill(sig);
      const line = await out.wait(new RegExp(`event=test_hold n=${n} `), 30000);
      const num = (k) => Number(new RegExp(` ${k}=(\\d+)`).exec(line)[1]);
      h.held = num('held') === 1;
      if (h.held !== want) throw new Error(`test_hold: wanted held=${want}: ${line}`);
      return { held: h.held, forwards: num('forwards'), running: num('running'), queued: num('queued') };
    },
    // SIGTERM and the exit code; fails the caller if the server does not stop in time.
    async stop(ms = 30000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), ms);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
  return h;
}

// A WebSocket client that queues parsed frames and lets a test wait for the next one that
// matches.
export function wsClient(url, opts = {}) {
  const ws = new WebSocket(url, opts);
  const frames = [];
  const waiters = [];
  let closeInfo = null;
  const closed = new Promise((resolve) => {
    ws.on('close', (code, reason) => {
      closeInfo = { code, reason: reason.toString() };
      resolve(closeInfo);
      for (const w of [...waiters]) w.fail(new Error(`connection closed (${code} ${reason})`));
    });
  });
  ws.on('error', () => {});
  ws.on('message', (data, isBinary) => {
    const f = isBinary ? { binary: data } : JSON.parse(data.toString());
    frames.push(f);
    for (const w of [...waiters]) if (w.pred(f)) { w.done(f); break; }
  });
  const opened = new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body })));
    });
    ws.once('error', reject);
  });
  const taken = new Set(); // frames already handed out by next()
  let syncs = 0;
  const c = {
    ws,
    frames,
    opened,
    closed,
    get closeInfo() { return closeInfo; },
    send: (o) => ws.send(typeof o === 'string' || Buffer.isBuffer(o) ? o : JSON.stringify(o)),
    // The first frame not handed out yet that matches pred (several may wait at once).
    next(pred = () => true, ms = 20000) {
      for (const f of frames) {
        if (!taken.has(f) && pred(f)) { taken.add(f); return Promise.resolve(f); }
      }
      if (closeInfo) return Promise.reject(new Error(`connection closed (${closeInfo.code} ${closeInfo.reason})`));
      return new Promise((resolve, reject) => {
        const w = {
          pred,
          done: (f) => { clearTimeout(timer); waiters.splice(waiters.indexOf(w), 1); taken.add(f); resolve(f); },
          fail: (e) => { clearTimeout(timer); waiters.splice(waiters.indexOf(w), 1); reject(e); },
        };
        // the message says what did come, so that a timeout on CI can be read from its log
        const timer = setTimeout(() => w.fail(new Error(`timed out waiting for a frame (${ms} ms; ${frames.length} frames came, the last: ${
          frames.slice(-6).map((f) => `${f.type}${f.id !== undefined ? `/${f.id}` : ''}${f.finish ? `:${f.finish}` : ''}${f.code ? `:${f.code}` : ''}`).join(' ') || 'none'})`)), ms);
        waiters.push(w);
      });
    },
    // Every frame of request id until its done or error.
    async collect(id, ms = 30000) {
      const out = [];
      for (;;) {
        const f = await c.next((x) => x.id === id, ms);
        out.push(f);
        if (f.type === 'done' || f.type === 'error') return out;
      }
    },
    close: () => ws.close(),
    // A barrier: resolves once every frame the server queued for this connection before it
    // read our ping has arrived (frames go out in order; a pong is never dropped).
    async sync() {
      const id = `sync-${++syncs}`;
      c.send({ type: 'ping', id });
      await c.next((f) => f.type === 'pong' && f.id === id);
    },
  };
  return c;
}

export async function connect(server, opts) {
  const c = wsClient(server.wsUrl, opts);
  await c.opened;
  const hello = await c.next((f) => f.type === 'hello');
  c.hello = hello;
  return c;
}

// With the engine held: one forward at a time until pred() holds for the frames client c has
// received, each forward's frames in before the next (c.sync()). Fails after max forwards.
export async function stepUntil(server, c, pred, max = 2000) {
  for (let i = 0; !pred(); i++) {
    if (i >= max) throw new Error(`stepUntil: not there after ${max} forwards`);
    await server.step();
    await c.sync();
  }
}

export const user = (content) => [{ role: 'user', content }];
// a message whose reply runs to many blocks (v5: 83 tokens, four answers, 88 one-token
// forwards): for tests that need a request still running after its first draft
export const FOUR_QUESTIONS = 'Where is my order 48213? How long does express shipping take? ' +
  'What are your store hours? Can I return the grey air fryer?';

export async function metrics(server) {
  const res = await fetch(`${server.url}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics: HTTP ${res.status}`);
  const families = parsePrometheus(await res.text());
  const get = (name, labels = {}) => {
    const f = families.find((x) => x.name === name);
    if (!f) return undefined;
    const m = f.metrics.find((x) => Object.entries(labels).every(([k, v]) => x.labels?.[k] === v));
    if (!m) return undefined;
    if (f.type === 'HISTOGRAM') return { count: Number(m.count), sum: Number(m.sum), buckets: m.buckets };
    return Number(m.value);
  };
  return { families, get };
}

// Polls until fn() is truthy.
export async function until(fn, ms = 10000, what = 'a condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
