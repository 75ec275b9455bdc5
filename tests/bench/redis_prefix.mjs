// Benchmark (issue: Redis as the cross-session cache): time to first draft for a prompt with a
// ~2,000-token shared prefix on a fresh server process, with a cold (empty) Redis and with a
// warm one (the pages written by an earlier process), side by side in one run.
//
//   node tests/bench/redis_prefix.mjs [--model DIR] [--rounds N]
// Needs FL_BIN (the fogline binary) and redis-server on PATH. The model defaults to a random
// 25M-parameter model with the default model's tokenizer (tests/bench/make_bench_model.py),
// made in a temporary directory.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, connect, freePort, until, metrics } from '../server/lib.mjs';

const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const rounds = Number(opt('--rounds', '3'));
let model = opt('--model', '');
const here = path.dirname(new URL(import.meta.url).pathname);
if (!model) {
  model = fs.mkdtempSync(path.join(os.tmpdir(), 'fl-bench-model-'));
  execFileSync('/usr/bin/python3', [path.join(here, 'make_bench_model.py'), model], { stdio: 'inherit' });
}

async function startRedis() {
  const port = await freePort();
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  await until(() => /Ready to accept/.test(out), 10000, 'redis');
  return { p, port, url: `redis://127.0.0.1:${port}` };
}

// ~2,000 tokens of a shop's policy text; round r changes its first word so rounds share nothing
function prefix(r) {
  const parts = [`Shop ${r}.`];
  for (let i = 1; parts.join(" ").length < 4000; i++)
    parts.push(`Policy ${i}: orders over ${i * 7} dollars ship free within ${i % 5 + 2} days; keep receipt ${1000 + i * 37}.`);
  return parts.join(' ');
}

async function ttfd(server, system) {
  const c = await connect(server);
  const t0 = performance.now();
  c.send({ type: 'chat', id: 'b', max_tokens: 16, messages: [{ role: 'system', content: system }, { role: 'user', content: 'Where is my order 48213?' }] });
  await c.next((f) => f.id === 'b' && (f.type === 'draft' || f.type === 'commit'), 120000);
  const t1 = performance.now();
  const frames = await c.collect('b', 120000);
  c.close();
  const done = frames[frames.length - 1];
  if (done.type !== 'done') throw new Error(JSON.stringify(done));
  return { ms: t1 - t0, prompt: done.usage.prompt_tokens, cached: done.usage.cached_tokens };
}

const redis = await startRedis();
const rows = [];
for (let r = 0; r < rounds; r++) {
  execFileSync('redis-cli', ['-p', String(redis.port), 'FLUSHALL']);
  const sys = prefix(r);
  const run = async () => {
    const s = await startServer(['--redis', redis.url, '--threads', '2'], { model });
    await until(async () => (await metrics(s)).get('fogline_redis_connected') === 1, 10000, 'connected');
    const x = await ttfd(s, sys);
    const m = await metrics(s);
    x.hits = m.get('fogline_kv_cache_pages_total', { outcome: 'hit' });
    x.rejected = m.get('fogline_kv_cache_pages_total', { outcome: 'rejected' });
    x.lookupErrors = m.get('fogline_kv_cache_lookup_errors_total');
    x.timeouts = m.get('fogline_redis_timeouts_total');
    await s.stop();
    return x;
  };
  const cold = await run(); // process 1: empty Redis, computes and writes the pages
  let last = -1;
  let same = 0;
  await until(() => {
    const n = Number(execFileSync('redis-cli', ['-p', String(redis.port), 'DBSIZE']).toString().trim());
    same = n === last ? same + 1 : 0;
    last = n;
    return same >= 4;
  }, 30000, 'writes');
  console.error(`round ${r}: ${last} keys in Redis after the cold run`);
  const warm = await run(); // process 2: the same prompt, pages in Redis
  rows.push({ r, prompt: cold.prompt, cold: cold.ms, warm: warm.ms, cached: warm.cached });
  console.error(`round ${r}: prompt ${cold.prompt} tokens, cold ${cold.ms.toFixed(0)} ms, warm ${warm.ms.toFixed(0)} ms ` +
    `(cached ${warm.cached}; warm lookup: ${warm.hits} pages hit, ${warm.rejected} rejected, ${warm.lookupErrors} errors, ${warm.timeouts} timeouts)`);
}
redis.p.kill('SIGKILL');
const med = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
const c = med(rows.map((x) => x.cold));
const w = med(rows.map((x) => x.warm));
console.log('| round | prompt tokens | cached tokens (warm) | cold TTFD ms | warm TTFD ms | warm / cold |');
console.log('|---|---|---|---|---|---|');
for (const x of rows)
  console.log(`| ${x.r} | ${x.prompt} | ${x.cached} | ${x.cold.toFixed(0)} | ${x.warm.toFixed(0)} | ${(100 * x.warm / x.cold).toFixed(1)}% |`);
console.log(`| median | | | ${c.toFixed(0)} | ${w.toFixed(0)} | ${(100 * w / c).toFixed(1)}% |`);
