#!/usr/bin/env node
// The soak: N clients for D minutes against one `fogline serve` with a real redis-server, each
// randomly connecting, chatting (with and without sessions, several at once), cancelling,
// vanishing mid-stream, using the OpenAI endpoint (streaming, aborted), and sending garbage
// (bad JSON, binary frames, oversized and invalid UTF-8 frames, unknown types and fields).
// Every 10 s it samples the server's RSS (/proc/PID/status VmRSS), open fds (/proc/PID/fd) and
// /metrics; at the end it stops the clients, waits for the server to be idle, checks that every
// KV page is back in the pool, checks Redis's values (every page blob one size, every session a
// JSON conversation), sends SIGTERM (exit 0 expected), and prints the table and a verdict.
//
//   node tests/soak/soak.mjs [--clients 50] [--minutes 30] [--bin build/server/fogline]
//        [--model DIR] [--sample-s 10] [--seed 1] [--max-rss-growth 10] [--log FILE]
//        [--redis-server redis-server] [--redis-cli redis-cli] [--server-args "..."]
//        [--http-close]
//
// Exit status 0 when the verdict passes: no crash (the server ran to the end and exited 0 on
// SIGTERM), no hang (it never stopped answering /metrics), every KV page back, no unexpected
// answer (see `unexpected` below), Redis values whole, and RSS growth after the warm-up (the
// first 20% of the samples) at most --max-rss-growth percent. tests/soak/README.md has the
// details.
import { spawn, execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const require = createRequire(path.join(root, 'tests/node/package.json'));
const WebSocket = require('ws');
const parsePrometheus = require('parse-prometheus-text-format');

// ---- options ----

function parseArgs(argv) {
  const o = {
    clients: 50, minutes: 30, bin: path.join(root, 'build/server/fogline'), model: '',
    sampleS: 10, seed: 1, maxRssGrowth: 10, log: '', redisServer: 'redis-server',
    redisCli: 'redis-cli', serverArgs: '', httpClose: false,
  };
  const names = {
    '--clients': ['clients', Number], '--minutes': ['minutes', Number], '--bin': ['bin', String],
    '--model': ['model', String], '--sample-s': ['sampleS', Number], '--seed': ['seed', Number],
    '--max-rss-growth': ['maxRssGrowth', Number], '--log': ['log', String],
    '--redis-server': ['redisServer', String], '--redis-cli': ['redisCli', String],
    '--server-args': ['serverArgs', String],
  };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--help' || argv[i] === '-h') {
      process.stdout.write(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n')
        .slice(1).filter((l, i, a) => a.slice(0, i + 1).every((x) => x.startsWith('//')))
        .map((l) => l.replace(/^\/\/ ?/, '')).join('\n') + '\n');
      process.exit(0);
    }
    if (argv[i] === '--http-close') { o.httpClose = true; continue; }
    const n = names[argv[i]];
    if (!n || i + 1 >= argv.length) {
      process.stderr.write(`soak: unknown or incomplete option '${argv[i]}' (--help)\n`);
      process.exit(2);
    }
    o[n[0]] = n[1](argv[++i]);
    if (n[1] === Number && !(o[n[0]] >= 0)) {
      process.stderr.write(`soak: ${argv[i - 1]} needs a non-negative number\n`);
      process.exit(2);
    }
  }
  if (o.clients < 1 || o.minutes <= 0 || o.sampleS <= 0) {
    process.stderr.write('soak: --clients >= 1, --minutes > 0 and --sample-s > 0\n');
    process.exit(2);
  }
  return o;
}
const opt = parseArgs(process.argv.slice(2));

// a seeded generator: the same seed makes the same choices (the timing still varies)
let seed = opt.seed >>> 0 || 1;
function rand() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => Date.now();

// ---- processes ----

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitFor(fn, ms, what) {
  const end = now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function startRedis() {
  const port = await freePort();
  const p = spawn(opt.redisServer, ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.on('error', (e) => (out += String(e)));
  await waitFor(() => /Ready to accept connections/.test(out) || p.exitCode !== null, 10000, 'redis-server');
  if (p.exitCode !== null) throw new Error(`redis-server failed: ${out}`);
  return { proc: p, port, url: `redis://127.0.0.1:${port}` };
}

function redisCli(port, args) {
  return new Promise((resolve, reject) => {
    execFile(opt.redisCli, ['-p', String(port), ...args], { maxBuffer: 64 << 20 }, (err, out) =>
      err ? reject(err) : resolve(out));
  });
}

const MAX_MESSAGE = 65536; // the soak server's --max-message-bytes: oversized frames stay cheap

async function startServer(redisUrl) {
  const port = await freePort();
  const args = ['serve', '--port', String(port), '--redis', redisUrl, '--max-message-bytes',
    String(MAX_MESSAGE), ...(opt.model ? ['--model', opt.model] : []),
    ...opt.serverArgs.split(' ').filter(Boolean)];
  const proc = spawn(opt.bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const logStream = opt.log ? fs.createWriteStream(opt.log) : null;
  let tail = [];
  let listening = false;
  let partial = '';
  const onData = (d) => {
    logStream?.write(d);
    partial += d.toString();
    const lines = partial.split('\n');
    partial = lines.pop();
    for (const l of lines) {
      if (/event=listening/.test(l)) listening = true;
      tail.push(l);
    }
    if (tail.length > 200) tail = tail.slice(-100);
  };
  proc.stdout.on('data', onData);
  proc.stderr.on('data', onData);
  const exited = new Promise((resolve) => proc.on('exit', (code, sig) => resolve(code ?? sig)));
  await waitFor(() => listening || proc.exitCode !== null, 120000, 'fogline serve to listen');
  if (!listening) throw new Error(`fogline serve did not start:\n${tail.join('\n')}`);
  return {
    proc, port, exited, tail: () => tail.join('\n'), logStream,
    url: `http://127.0.0.1:${port}`, wsUrl: `ws://127.0.0.1:${port}/ws`,
  };
}

// ---- measurements ----

// HTTP requests reuse keep-alive connections, as real clients do, unless --http-close
const HTTP_HEADERS = opt.httpClose ? { connection: 'close' } : {};

async function scrape(server) {
  const res = await fetch(`${server.url}/metrics`, { headers: HTTP_HEADERS, signal: AbortSignal.timeout(20000) });
  if (res.status !== 200) throw new Error(`/metrics: HTTP ${res.status}`);
  const fam = parsePrometheus(await res.text());
  const get = (name, labels = {}) => {
    const f = fam.find((x) => x.name === name);
    const m = f?.metrics.find((x) => Object.entries(labels).every(([k, v]) => x.labels?.[k] === v));
    return m ? Number(m.value) : NaN;
  };
  const sum = (name) => {
    const f = fam.find((x) => x.name === name);
    return f ? f.metrics.reduce((a, m) => a + Number(m.value), 0) : NaN;
  };
  const errs = {};
  for (const m of fam.find((x) => x.name === 'fogline_errors_total')?.metrics || []) errs[m.labels.code] = Number(m.value);
  return {
    stop: get('fogline_requests_total', { outcome: 'stop' }),
    length: get('fogline_requests_total', { outcome: 'length' }),
    cancelled: get('fogline_requests_total', { outcome: 'cancelled' }),
    error: get('fogline_requests_total', { outcome: 'error' }),
    rejected: get('fogline_requests_total', { outcome: 'rejected' }),
    errors: sum('fogline_errors_total'),
    errs,
    used: get('fogline_kv_pages', { state: 'used' }),
    free: get('fogline_kv_pages', { state: 'free' }),
    ws: get('fogline_ws_connections'),
    http: get('fogline_http_open'),
    active: get('fogline_requests_active'),
    tokenizing: get('fogline_requests_tokenizing'),
    running: get('fogline_sequences_running'),
    queued: get('fogline_queue_depth'),
    redis: get('fogline_redis_connected'),
    cacheHit: get('fogline_kv_cache_pages_total', { outcome: 'hit' }),
    rejectedPages: get('fogline_kv_cache_pages_total', { outcome: 'rejected' }),
  };
}

// CPU use of the main (loop) thread over one second, e.g. "99% CPU": a stuck loop spins or sleeps
function procCpu(pid) {
  try {
    const ticks = () => fs.readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
      .slice(11, 13).reduce((a, x) => a + Number(x), 0);
    const a = ticks();
    const end = Date.now() + 1000;
    while (Date.now() < end); // a busy second: this runs once, when the run is already over
    return `${ticks() - a}% CPU`;
  } catch {
    return 'gone';
  }
}

function procStats(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]);
  const fds = fs.readdirSync(`/proc/${pid}/fd`).length;
  const threads = Number(/Threads:\s+(\d+)/.exec(status)?.[1]);
  return { rssKb, fds, threads, maps: mappings(pid) };
}

// RSS per mapping (/proc/PID/smaps), keyed by start address and name, to tell where growth is:
// the KV pool (one anonymous mapping of --kv-pages x page size), malloc's arenas ([heap] and
// 64 MiB anonymous regions), thread stacks, the mmapped weights.
function mappings(pid) {
  const out = new Map();
  let key = null;
  let size = 0;
  for (const line of fs.readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const h = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (h) {
      size = (parseInt(h[2], 16) - parseInt(h[1], 16)) / 1024;
      key = `${h[1]} ${h[3] || '[anon]'}`;
      continue;
    }
    const r = /^Rss:\s+(\d+) kB/.exec(line);
    if (r && key) out.set(key, { rssKb: Number(r[1]), sizeKb: size });
  }
  return out;
}

// The mappings whose RSS grew most from a to b (maps from mappings()).
function mapGrowth(a, b, n = 6) {
  const rows = [];
  for (const [k, v] of b) {
    const before = a.get(k)?.rssKb ?? 0;
    if (v.rssKb !== before) rows.push({ k, before, after: v.rssKb, sizeKb: v.sizeKb });
  }
  for (const [k, v] of a) if (!b.has(k)) rows.push({ k, before: v.rssKb, after: 0, sizeKb: v.sizeKb });
  rows.sort((x, y) => Math.abs(y.after - y.before) - Math.abs(x.after - x.before));
  return rows.slice(0, n).map((r) => `${r.k.replace(/^[0-9a-f]+ /, '')} (${(r.sizeKb / 1024).toFixed(0)} MiB mapped): ` +
    `${(r.before / 1024).toFixed(1)} -> ${(r.after / 1024).toFixed(1)} MiB`);
}

// ---- the clients ----

const PROMPTS = [
  'Where is my order 48213?', 'Can you cancel my order 55120?', 'I want to return my blender.',
  'Is the tablet in stock?', 'My package arrived damaged, what now?', 'How do I change my shipping address?',
  'Do you ship to Canada?', 'I was charged twice for order 77102.', 'hello', 'Thanks, that is all.',
  'Can I get an invoice for order 31337?', 'What is your refund policy?',
];
const SYSTEM = 'You are the help desk of an online shop. ' +
  Array.from({ length: 8 }, (_, i) => `Rule ${i + 1}: answer politely and copy order numbers exactly.`).join(' ');

const stats = {
  actions: {}, chats: 0, done: {}, busy: 0, unexpected: 0, details: [], connects: 0,
};
function count(name) { stats.actions[name] = (stats.actions[name] || 0) + 1; }
function unexpected(what) {
  stats.unexpected++;
  if (stats.details.length < 30) stats.details.push(`${new Date().toISOString()} ${what}`);
}

function randomChat(id, extra = {}) {
  const msgs = [];
  if (rand() < 0.3) msgs.push({ role: 'system', content: SYSTEM });
  msgs.push({ role: 'user', content: pick(PROMPTS) });
  const c = { type: 'chat', id, messages: msgs, max_tokens: 8 + Math.floor(rand() * 120), ...extra };
  if (rand() < 0.3) { c.temperature = 0.7; c.seed = Math.floor(rand() * 1000); }
  if (rand() < 0.4) {
    c.decoding = pick([{ policy: 'sequential', pipeline: false }, { policy: 'static', k: 2 },
      { policy: 'dynamic', threshold: 0.8 }, { policy: 'entropy' }, { max_blocks: 1 }, { overlap: false }]);
  }
  return c;
}

// One WebSocket connection: frames dispatched by request id; frames without one to `other`.
class Conn {
  constructor(url) {
    this.ws = new WebSocket(url);
    this.byId = new Map();
    this.other = [];
    this.otherWaiters = [];
    this.closeInfo = null;
    this.ws.on('error', () => {});
    this.closed = new Promise((res) => this.ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString() };
      for (const h of this.byId.values()) h.onClose(this.closeInfo);
      for (const w of this.otherWaiters) w(null);
      res(this.closeInfo);
    }));
    this.ws.on('message', (data, isBinary) => {
      let f;
      try { f = isBinary ? { binary: true } : JSON.parse(data.toString()); } catch {
        unexpected(`a frame that is not JSON: ${data.toString().slice(0, 80)}`);
        return;
      }
      const h = f.id !== undefined && this.byId.get(f.id);
      if (h) h.onFrame(f);
      else {
        this.other.push(f);
        const ws = this.otherWaiters;
        this.otherWaiters = [];
        for (const w of ws) w(f);
      }
    });
    this.opened = new Promise((res, rej) => {
      this.ws.once('open', res);
      this.ws.once('unexpected-response', (req, r) => rej(new Error(`upgrade refused: HTTP ${r.statusCode}`)));
      this.ws.once('error', rej);
    });
  }
  get open() { return this.ws.readyState === WebSocket.OPEN; }
  send(x) { if (this.open) this.ws.send(typeof x === 'string' || Buffer.isBuffer(x) ? x : JSON.stringify(x)); }
  // the next frame without a request id (hello, errors about ids-less garbage, pong)
  nextOther(pred, ms) {
    const hit = this.other.findIndex(pred);
    if (hit >= 0) return Promise.resolve(this.other.splice(hit, 1)[0]);
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(null), ms);
      const w = (f) => {
        if (f === null) { clearTimeout(t); resolve(null); return; }
        if (pred(f)) { clearTimeout(t); this.other.splice(this.other.indexOf(f), 1); resolve(f); } else this.otherWaiters.push(w);
      };
      this.otherWaiters.push(w);
    });
  }
  // Starts a chat; resolves with {frames, end} when it ends: end is the done/error frame, or
  // 'closed' / 'timeout'. onFrame(f) sees each frame as it comes.
  chat(req, { ms = 180000, onFrame } = {}) {
    return new Promise((resolve) => {
      const frames = [];
      const finish = (end) => { clearTimeout(t); this.byId.delete(req.id); resolve({ frames, end }); };
      const t = setTimeout(() => finish('timeout'), ms);
      this.byId.set(req.id, {
        onFrame: (f) => {
          frames.push(f);
          onFrame?.(f);
          if (f.type === 'done' || f.type === 'error') finish(f);
        },
        onClose: () => finish('closed'),
      });
      this.send(req);
    });
  }
}

// Checks one chat's frames: commits in block order once each, done last with a known finish.
function checkChat(what, r, { cancelOk = false, closeOk = false } = {}) {
  if (r.end === 'timeout') { unexpected(`${what}: no done within 180 s`); return null; }
  if (r.end === 'closed') { if (!closeOk) unexpected(`${what}: connection closed mid-request`); return null; }
  if (r.end.type === 'error') {
    if (r.end.code === 'busy') { stats.busy++; return null; }
    unexpected(`${what}: error ${r.end.code}: ${r.end.message}`);
    return null;
  }
  const done = r.end;
  stats.done[done.finish] = (stats.done[done.finish] || 0) + 1;
  if (!['stop', 'length', 'cancelled'].includes(done.finish)) unexpected(`${what}: finish ${done.finish}`);
  if (done.finish === 'cancelled' && !cancelOk) unexpected(`${what}: cancelled without a cancel`);
  let next = 0;
  for (const f of r.frames) {
    if (f.type === 'commit') {
      if (f.block !== next) unexpected(`${what}: commit of block ${f.block}, expected ${next}`);
      next = f.block + 1;
    }
  }
  if (done.finish !== 'cancelled' && !(done.usage?.completion_tokens >= 0)) unexpected(`${what}: done without usage`);
  return done;
}

const GARBAGE = [
  ['bad json', () => '{"type":"chat","id":', 'bad_json'],
  ['json array', () => '[1,2,3]', 'bad_json'],
  ['binary', () => Buffer.from([1, 2, 3, 0xff]), 'binary_not_supported'],
  ['unknown type', () => ({ type: 'frobnicate' }), 'unknown_type'],
  ['out of range', () => ({ type: 'chat', id: 'g', messages: [{ role: 'user', content: 'x' }], temperature: 5 }), 'out_of_range'],
  ['unknown field', () => ({ type: 'chat', id: 'g', messages: [{ role: 'user', content: 'x' }], colour: 'red' }), 'bad_request'],
  ['bad role', () => ({ type: 'chat', id: 'g', messages: [{ role: 'wizard', content: 'x' }] }), 'bad_request'],
  ['unknown cancel', () => ({ type: 'cancel', id: 'nobody' }), 'unknown_id'],
];

async function client(k, server, run) {
  let conn = null;
  let seq = 0;
  const id = () => `c${k}-${++seq}`;
  const ensure = async () => {
    if (conn && conn.open) return conn;
    stats.connects++;
    conn = new Conn(server.wsUrl);
    try {
      await conn.opened;
    } catch (e) {
      unexpected(`client ${k}: connect failed: ${e.message}`);
      conn = null;
      await sleep(1000);
      return null;
    }
    const hello = await conn.nextOther((f) => f.type === 'hello', 20000);
    if (!hello) unexpected(`client ${k}: no hello`);
    return conn;
  };
  while (now() < run.deadline) {
    const r = rand();
    try {
      if (r < 0.22) {
        count('chat');
        const c = await ensure(); if (!c) continue;
        stats.chats++;
        checkChat('chat', await c.chat(randomChat(id())));
      } else if (r < 0.40) {
        count('chat+session');
        const c = await ensure(); if (!c) continue;
        stats.chats++;
        const session = `soak-${k}-${Math.floor(rand() * 3)}`;
        checkChat('session chat', await c.chat(randomChat(id(), { session })));
      } else if (r < 0.48) {
        count('cancel');
        const c = await ensure(); if (!c) continue;
        stats.chats++;
        const rid = id();
        let sent = false;
        const res = await c.chat(randomChat(rid, { max_tokens: 128 }), {
          onFrame: (f) => { if (!sent && (f.type === 'draft' || f.type === 'commit')) { sent = true; c.send({ type: 'cancel', id: rid }); } },
        });
        checkChat('cancel', res, { cancelOk: true });
        // a cancel that crossed the done is answered unknown_id (no id match left): drop it
        if (sent) await c.nextOther((f) => f.type === 'error' && f.code === 'unknown_id', 50);
      } else if (r < 0.55) {
        count('vanish mid-stream');
        const c = await ensure(); if (!c) continue;
        stats.chats++;
        await new Promise((resolve) => {
          c.chat(randomChat(id(), { max_tokens: 128 }), {
            onFrame: (f) => { if (f.type === 'draft' || f.type === 'commit' || f.type === 'done') { c.ws.terminate(); resolve(); } },
          }).then((res) => { if (res.end !== 'closed') checkChat('vanish', res); resolve(); });
        });
        conn = null;
      } else if (r < 0.60) {
        count('parallel chats');
        const c = await ensure(); if (!c) continue;
        const n = 2 + Math.floor(rand() * 3);
        stats.chats += n;
        const rs = await Promise.all(Array.from({ length: n }, () => c.chat(randomChat(id()))));
        for (const x of rs) checkChat('parallel', x);
      } else if (r < 0.70) {
        const [name, make, code] = pick(GARBAGE);
        count(`garbage: ${name}`);
        const c = await ensure(); if (!c) continue;
        const g = make();
        if (typeof g === 'object' && !Buffer.isBuffer(g) && g.id) g.id = id();
        if (typeof g === 'object' && !Buffer.isBuffer(g) && g.id) {
          const res = await c.chat(g, { ms: 20000 });
          if (res.end?.type !== 'error' || res.end.code !== code) unexpected(`garbage ${name}: ${JSON.stringify(res.end)}`);
        } else {
          c.send(g);
          const f = await c.nextOther((x) => x.type === 'error', 20000);
          if (!f || f.code !== code) unexpected(`garbage ${name}: ${JSON.stringify(f)}`);
        }
      } else if (r < 0.73) {
        // these two close the connection: error, then 1009 / 1007
        const big = rand() < 0.5;
        count(big ? 'garbage: oversized' : 'garbage: invalid utf-8');
        const c = await ensure(); if (!c) continue;
        if (big) c.send('x'.repeat(MAX_MESSAGE + 1 + Math.floor(rand() * 1000)));
        else c.ws.send(Buffer.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x7d]), { binary: false });
        const want = big ? ['message_too_large', 1009] : ['invalid_utf8', 1007];
        const f = await c.nextOther((x) => x.type === 'error', 20000);
        if (!f || f.code !== want[0]) unexpected(`garbage ${want[0]}: ${JSON.stringify(f)}`);
        const closed = await Promise.race([c.closed, sleep(20000).then(() => null)]);
        if (!closed || closed.code !== want[1]) unexpected(`garbage ${want[0]}: close ${JSON.stringify(closed)}`);
        conn = null;
      } else if (r < 0.88) {
        const stream = rand() < 0.6;
        const abort = stream && rand() < 0.3;
        count(`openai${stream ? ' stream' : ''}${abort ? ' aborted' : ''}`);
        stats.chats++;
        const body = randomChat('x');
        delete body.type; delete body.id;
        if (rand() < 0.3) body.session = `soak-oa-${k}`;
        const ac = new AbortController();
        const res = await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json', ...HTTP_HEADERS }, signal: ac.signal,
          body: JSON.stringify({ ...body, stream }),
        });
        if (res.status === 429) { stats.busy++; await res.text(); continue; }
        if (res.status !== 200) { unexpected(`openai: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`); continue; }
        if (!stream) {
          const j = await res.json();
          const fr = j.choices?.[0]?.finish_reason;
          if (!['stop', 'length'].includes(fr)) unexpected(`openai: finish_reason ${fr}`);
          else stats.done[fr] = (stats.done[fr] || 0) + 1;
        } else {
          const reader = res.body.getReader();
          let all = '';
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            all += new TextDecoder().decode(value);
            if (abort && all.includes('"content"')) { ac.abort(); break; }
          }
          if (!abort) {
            if (!all.trimEnd().endsWith('data: [DONE]')) unexpected(`openai stream: no [DONE]: ${all.slice(-200)}`);
            if (/"error"/.test(all)) unexpected(`openai stream: ${all.slice(-300)}`);
          }
        }
      } else if (r < 0.92) {
        count('ping');
        const c = await ensure(); if (!c) continue;
        c.send({ type: 'ping', id: 'p' });
        // pong carries id "p", which no chat uses: it lands in `other` only if no handler
        const f = await c.nextOther((x) => x.type === 'pong', 20000);
        if (!f) unexpected('ping: no pong');
      } else if (r < 0.96) {
        count('reconnect');
        if (conn) { conn.ws.close(); await Promise.race([conn.closed, sleep(5000)]); }
        conn = null;
      } else {
        count('idle');
        await sleep(500 + rand() * 3000);
      }
    } catch (e) {
      if (e.name === 'AbortError') continue;
      unexpected(`client ${k}: ${e.stack?.split('\n').slice(0, 2).join(' ') ?? e}`);
    }
    await sleep(rand() * 500);
  }
  if (conn) { conn.ws.close(); await Promise.race([conn.closed, sleep(5000)]); }
}

// ---- the run ----

function row(cells, widths) { return cells.map((c, i) => String(c).padStart(widths[i])).join(' '); }
const HEAD = ['t_s', 'rss_MiB', 'fds', 'thr', 'ws', 'active', 'queue', 'kv_used', 'stop', 'length', 'cancel', 'error', 'reject', 'errs_sent', 'redis'];
const W = [6, 8, 5, 4, 4, 6, 5, 7, 6, 6, 6, 5, 6, 9, 5];

async function main() {
  if (!fs.existsSync(opt.bin)) {
    process.stderr.write(`soak: no fogline binary at ${opt.bin} (build it, or --bin)\n`);
    process.exit(2);
  }
  const redis = await startRedis();
  const server = await startServer(redis.url);
  const pid = server.proc.pid;
  await waitFor(async () => (await scrape(server)).redis === 1, 15000, 'Redis to be connected');
  const m0 = await scrape(server);
  const totalPages = m0.used + m0.free;
  const idle0 = procStats(pid);
  const t0 = now();
  const run = { deadline: t0 + opt.minutes * 60000 };
  let crashed = null;
  let stopping = false;
  server.exited.then((code) => {
    if (stopping) return;
    crashed = code;
    run.deadline = 0; // the clients stop at once: the run is over
    const why = /event=draining reason=(\S+)/.exec(server.tail());
    console.log(`soak: the server exited during the run (${code})` +
      `${why ? `: it logged event=draining reason=${why[1]}, a signal from outside the soak` : ''}`);
  });
  console.log(`soak: ${opt.clients} clients for ${opt.minutes} min against pid ${pid} (${opt.bin}), ` +
    `Redis on ${redis.port}, ${totalPages} KV pages, seed ${opt.seed}`);
  console.log(row(HEAD, W));

  const samples = [];
  let prev = m0;
  const sample = async () => {
    const p = procStats(pid);
    const m = await scrape(server);
    const s = { t: (now() - t0) / 1000, ...p, m, d: {} };
    for (const k of ['stop', 'length', 'cancelled', 'error', 'rejected', 'errors']) s.d[k] = m[k] - prev[k];
    prev = m;
    samples.push(s);
    console.log(row([s.t.toFixed(0), (s.rssKb / 1024).toFixed(1), s.fds, s.threads, m.ws, m.active, m.queued, m.used,
      s.d.stop, s.d.length, s.d.cancelled, s.d.error, s.d.rejected, s.d.errors, m.redis], W));
  };
  // a server that stops answering /metrics (twice in a row, 20 s each) is hung: the run ends
  let hung = null;
  let misses = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await sleep(opt.sampleS * 1000);
      if (!sampling || crashed !== null) break;
      try {
        await sample();
        misses = 0;
      } catch (e) {
        unexpected(`sample: ${e.message}`);
        if (++misses >= 2) {
          hung = { t: (now() - t0) / 1000, cpu: procCpu(pid) };
          console.log(`soak: the server stopped answering /metrics at ${hung.t.toFixed(0)} s ` +
            `(loop thread ${hung.cpu}); the run ends here`);
          run.deadline = 0;
          break;
        }
      }
    }
  })();

  // clients start spread over the first 5 s
  const clients = Array.from({ length: opt.clients }, (_, k) =>
    sleep((k * 5000) / opt.clients).then(() => client(k, server, run)));
  await Promise.all(clients);
  sampling = false;
  await sampler;
  const loadEnd = now();

  // idle: every request over, every connection closed, every page back
  let idle = null;
  let pagesBack = false;
  if (hung) {
    unexpected(`the server hung at ${hung.t.toFixed(0)} s; no idle check`);
  } else try {
    idle = await waitFor(async () => {
      const m = await scrape(server);
      return m.used === 0 && m.active === 0 && m.tokenizing === 0 && m.running === 0 && m.queued === 0 &&
        m.ws === 0 && m.http === 0 ? m : null;
    }, 60000, 'the server to be idle');
    // used = 0: no page held by a sequence or the persistence thread; the rest is free or kept
    // in the engine's prefix cache (free for any request, but in neither gauge)
    pagesBack = idle.used === 0 && idle.free <= totalPages;
  } catch (e) {
    const m = await scrape(server).catch(() => null);
    unexpected(`${e.message}: ${JSON.stringify(m)}`);
  }
  // fds: the clients' keep-alive HTTP sockets close on their own (undici: 4 s idle)
  let idle1 = null;
  if (crashed === null && !hung) {
    await waitFor(async () => { await scrape(server); return procStats(pid).fds <= idle0.fds; }, 30000, 'fds')
      .catch(() => {});
    idle1 = procStats(pid);
  }
  const final = await scrape(server).catch(() => null);

  // Redis: whole values only (every page blob one size; every session a JSON conversation)
  const LUA = `local sizes = {} local n = 0 local bad = 0 local ns = 0
    for _, k in ipairs(redis.call('KEYS', 'fogline:kv:*')) do
      if k ~= 'fogline:kv:lru' then n = n + 1 local l = redis.call('STRLEN', k) sizes[l] = (sizes[l] or 0) + 1 end end
    for _, k in ipairs(redis.call('KEYS', 'fogline:session:*')) do
      ns = ns + 1
      local ok, v = pcall(cjson.decode, redis.call('GET', k))
      if not ok or type(v) ~= 'table' or type(v.messages) ~= 'table' or #v.messages < 2 then bad = bad + 1 end end
    local out = {n, ns, bad, redis.call('ZCARD', 'fogline:kv:lru')}
    for l, c in pairs(sizes) do table.insert(out, l .. ':' .. c) end
    return out`;
  let redisCheck = { ok: false, text: 'not checked' };
  try {
    const out = (await redisCli(redis.port, ['EVAL', LUA, '0'])).trim().split('\n');
    const [n, ns, bad, zcard, ...sizes] = out;
    const ok = sizes.length <= 1 && Number(bad) === 0 && Number(zcard) === Number(n);
    redisCheck = { ok, text: `${n} pages (sizes ${sizes.join(', ') || 'none'}), LRU ${zcard}, ${ns} sessions, ${bad} unreadable` };
  } catch (e) {
    redisCheck = { ok: false, text: `redis-cli failed: ${e.message}` };
  }

  // SIGTERM: exit 0
  stopping = true;
  let exitCode = crashed;
  if (crashed === null) {
    server.proc.kill('SIGTERM');
    const t = setTimeout(() => server.proc.kill('SIGKILL'), 60000);
    exitCode = await server.exited;
    clearTimeout(t);
  }
  redis.proc.kill('SIGKILL');
  server.logStream?.end();

  // the verdict
  const warm = samples.filter((s) => s.t >= 0.2 * (loadEnd - t0) / 1000);
  const base = warm[0];
  const last = samples.at(-1);
  const growth = base && last ? (100 * (last.rssKb - base.rssKb)) / base.rssKb : NaN;
  const peak = samples.reduce((a, s) => Math.max(a, s.rssKb), 0);
  console.log('');
  console.log(`requests (server): stop ${final?.stop} length ${final?.length} cancelled ${final?.cancelled} ` +
    `error ${final?.error} rejected ${final?.rejected}; errors sent ${JSON.stringify(final?.errs ?? {})}`);
  console.log(`client actions: ${Object.entries(stats.actions).sort().map(([k, v]) => `${k} ${v}`).join(', ')}`);
  console.log(`client-side: chats ${stats.chats}, done ${JSON.stringify(stats.done)}, busy ${stats.busy}, WebSocket connections ${stats.connects}`);
  console.log(`Redis: ${redisCheck.text}; KV cache pages hit ${final?.cacheHit}, rejected ${final?.rejectedPages}`);
  console.log(`idle before: RSS ${(idle0.rssKb / 1024).toFixed(1)} MiB, ${idle0.fds} fds, ${idle0.threads} threads; ` +
    `idle after: ${idle1 ? `RSS ${(idle1.rssKb / 1024).toFixed(1)} MiB, ${idle1.fds} fds, ${idle1.threads} threads` : 'n/a'}`);
  const fdsBack = idle1 && idle1.fds === idle0.fds;
  const pass = crashed === null && !hung && exitCode === 0 && pagesBack && stats.unexpected === 0 && redisCheck.ok &&
    Number.isFinite(growth) && growth <= opt.maxRssGrowth && fdsBack;
  console.log('');
  console.log('verdict');
  console.log(`  crashes: ${crashed === null ? 0 : `1 (exit ${crashed})`}; hangs: ${hung ? `1 (at ${hung.t.toFixed(0)} s, loop thread ${hung.cpu})` : 0}; ` +
    `exit on SIGTERM: ${exitCode}`);
  console.log(`  pages back: ${pagesBack ? 'yes' : 'NO'} (idle: ${idle ? idle.used : '?'} used, ${idle ? idle.free : '?'} free, ` +
    `${idle ? totalPages - idle.used - idle.free : '?'} in the prefix cache, of ${totalPages})`);
  console.log(`  RSS growth after warm-up: ${Number.isFinite(growth) ? growth.toFixed(1) : '?'}% ` +
    `(${base ? (base.rssKb / 1024).toFixed(1) : '?'} MiB at ${base ? base.t.toFixed(0) : '?'} s -> ` +
    `${last ? (last.rssKb / 1024).toFixed(1) : '?'} MiB at ${last ? last.t.toFixed(0) : '?'} s; peak ${(peak / 1024).toFixed(1)} MiB; limit ${opt.maxRssGrowth}%)`);
  if (base && last) {
    console.log('  RSS growth by mapping (warm-up sample -> last sample):');
    for (const l of mapGrowth(base.maps, last.maps)) console.log(`    ${l}`);
  }
  console.log(`  fds back: ${fdsBack ? 'yes' : 'NO'} (${idle0.fds} -> ${idle1?.fds ?? '?'})`);
  console.log(`  unexpected answers: ${stats.unexpected}`);
  for (const d of stats.details) console.log(`    ${d}`);
  console.log(`  Redis values whole: ${redisCheck.ok ? 'yes' : 'NO'}`);
  console.log(`  ${pass ? 'PASS' : 'FAIL'}`);
  if (crashed !== null || hung) console.log(`server log tail:\n${server.tail().split('\n').slice(-15).join('\n')}`);
  process.exit(pass ? 0 : 1);
}

main().catch((e) => {
  console.error(`soak: ${e.stack || e}`);
  process.exit(1);
});
