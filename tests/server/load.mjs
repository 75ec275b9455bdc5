#!/usr/bin/env node
// Load test for `fogline serve` (a script, not a timed test): N concurrent WebSocket clients
// each run chats back to back for a bounded time, with prompts from the held-out help-desk
// set. Reports time to first draft (p50/p99), the gap between consecutive updates of a
// request (p50/p99/max), errors (must be 0), throughput, and the server's RSS per idle
// connection (RSS with N idle connections minus RSS before them, over N).
//
//   node tests/server/load.mjs --bin build/server/fogline [--model DIR] [--clients 200]
//        [--duration 30] [--max-tokens 48] [--json out.json] [-- extra serve flags]
//   node tests/server/load.mjs --url ws://host:port/ws --pid PID ...   (a running server)
import fs from 'node:fs';
import { startServer, wsClient } from './lib.mjs';

const argv = process.argv.slice(2);
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : def;
};
const dd = argv.indexOf('--');
const serveArgs = dd >= 0 ? argv.slice(dd + 1) : [];
const clients = Number(opt('clients', 200));
const duration = Number(opt('duration', 30));
const maxTokens = Number(opt('max-tokens', 48));
const prompts = JSON.parse(fs.readFileSync(new URL('../data/helpdesk_heldout.json', import.meta.url)));

const rssKb = (pid) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (a, p) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

let server = null;
let url = opt('url', null);
let pid = Number(opt('pid', 0));
if (!url) {
  if (opt('bin')) process.env.FL_BIN = opt('bin');
  const model = opt('model', process.env.FL_SERVE_MODEL || '');
  server = await startServer(['--max-connections', String(clients + 16), '--log-level', 'warn', ...serveArgs], { model });
  url = server.wsUrl;
  pid = server.proc.pid;
}

async function open() {
  const c = wsClient(url);
  await c.opened;
  await c.next((f) => f.type === 'hello');
  return c;
}

const say = (m) => process.stderr.write(`load: ${m}\n`);
say(`server at ${url}`);
// warm up: one chat so the model's pages and caches are touched before measuring RSS
{
  const c = await open();
  c.send({ type: 'chat', id: 'warm', messages: prompts[0].messages, max_tokens: maxTokens });
  await c.collect('warm', 60000);
  c.close();
  await sleep(300);
}
const rss0 = pid ? rssKb(pid) : NaN;
say(`warmed up; opening ${clients} connections`);
const conns = [];
for (let i = 0; i < clients; i++) conns.push(await open());
await sleep(1000);
const rss1 = pid ? rssKb(pid) : NaN;

say(`running chats for ${duration} s`);
const ttfd = [];      // ms from chat to its first draft (or commit)
const gaps = [];      // ms between consecutive updates of one request
const errors = [];
let done = 0;
let tokens = 0;
let cancelled = 0;
const t0 = Date.now();
const end = t0 + duration * 1000;

async function runClient(c, k) {
  let n = 0;
  while (Date.now() < end) {
    const id = `c${k}-${n++}`;
    const p = prompts[(k * 7 + n) % prompts.length];
    const sent = performance.now();
    let last = 0;
    c.send({ type: 'chat', id, messages: p.messages, max_tokens: maxTokens });
    for (;;) {
      let f;
      try {
        f = await c.next((x) => x.id === id, 120000);
      } catch (e) {
        errors.push(`${id}: ${e.message}`);
        return;
      }
      const now = performance.now();
      if (f.type === 'draft' || f.type === 'commit') {
        if (!last) ttfd.push(now - sent);
        else gaps.push(now - last);
        last = now;
      } else if (f.type === 'done') {
        if (f.finish === 'cancelled') cancelled++;
        done++;
        tokens += f.usage.completion_tokens;
        break;
      } else if (f.type === 'error') {
        errors.push(`${id}: ${f.code} ${f.message}`);
        break;
      }
    }
  }
}
await Promise.all(conns.map((c, k) => runClient(c, k)));
const secs = (Date.now() - t0) / 1000;
for (const c of conns) {
  if (c.closeInfo) errors.push(`connection closed early: ${c.closeInfo.code} ${c.closeInfo.reason}`);
  c.close();
}
const res = {
  clients,
  duration_s: Number(secs.toFixed(1)),
  max_tokens: maxTokens,
  requests_done: done,
  requests_cancelled: cancelled,
  errors: errors.length,
  reply_tokens_per_s: Number((tokens / secs).toFixed(1)),
  requests_per_s: Number((done / secs).toFixed(2)),
  ttfd_ms_p50: Number(pct(ttfd, 50).toFixed(1)),
  ttfd_ms_p99: Number(pct(ttfd, 99).toFixed(1)),
  update_gap_ms_p50: Number(pct(gaps, 50).toFixed(1)),
  update_gap_ms_p99: Number(pct(gaps, 99).toFixed(1)),
  update_gap_ms_max: Number(Math.max(...gaps, 0).toFixed(1)),
  rss_mb_before: Number((rss0 / 1024).toFixed(1)),
  rss_mb_idle_conns: Number((rss1 / 1024).toFixed(1)),
  rss_kb_per_idle_conn: Number(((rss1 - rss0) / clients).toFixed(1)),
};
console.log(JSON.stringify(res, null, 1));
if (errors.length) console.error(errors.slice(0, 10).join('\n'));
if (opt('json')) fs.writeFileSync(opt('json'), JSON.stringify(res, null, 1));
if (server) {
  const code = await server.stop();
  if (code !== 0) {
    console.error(`server exit ${code}`);
    process.exitCode = 1;
  }
}
if (errors.length) process.exitCode = 1;
