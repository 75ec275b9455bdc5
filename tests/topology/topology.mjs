// The deployed topology without Docker: one redis-server, two `fogline serve` replicas and
// Debian's nginx in front of them with docker/nginx/fogline.conf — the same file the Compose
// demo mounts, filled in here the way the nginx image's envsubst fills it there.
//
// Every process runs as this user on loopback ports that were free a moment before (a port
// taken in between is retried). Everything started here is stopped by stop(); a process left
// behind by a failed test is killed at exit, and a watchdog kills them all (and fails) before
// ctest's own timeout could leave them orphaned.
//
// Environment: FL_BIN (the fogline binary), FL_SERVE_MODEL (model directory; the built-in
// model by default), FL_NGINX (nginx binary; /usr/sbin/nginx), FL_REDIS_SERVER (redis-server).
import { spawn } from 'node:child_process';
import { after } from 'node:test';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, freePort, lineLog } from '../server/lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
export const NGINX_TEMPLATE = path.resolve(here, '../../docker/nginx/fogline.conf');
const NGINX = process.env.FL_NGINX || '/usr/sbin/nginx';
const REDIS = process.env.FL_REDIS_SERVER || 'redis-server';

// Every child process this module starts, so that none outlives the test run. nginx runs in
// a process group of its own (spawned detached) and is killed as a group: killing only its
// master would leave the worker running. Temporary directories go too, unless
// FL_TOPOLOGY_KEEP is set.
const children = new Set();
const groups = new Set();
const dirs = new Set();
function track(proc, { group = false } = {}) {
  children.add(proc);
  if (group) groups.add(proc);
  proc.on('exit', () => {
    children.delete(proc);
    if (!group) return;
    // the master is gone: so must its workers be (a no-op after a clean stop)
    try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* none left */ }
    groups.delete(proc);
  });
  return proc;
}
function hardKill(p) {
  try {
    if (groups.has(p)) process.kill(-p.pid, 'SIGKILL');
    else if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  } catch { /* already gone */ }
}
function killAll() {
  for (const p of children) hardKill(p);
  for (const p of groups) hardKill(p); // its workers, even when the master is gone
  if (!process.env.FL_TOPOLOGY_KEEP) for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => { killAll(); process.exit(1); });
}
// ctest's TIMEOUT kills only this node process; kill the topology before that can happen.
const WATCHDOG_MS = Number(process.env.FL_TOPOLOGY_WATCHDOG_MS || 270000);
const watchdog = setTimeout(() => {
  process.stderr.write(`topology: watchdog: still running after ${WATCHDOG_MS} ms; killing everything\n`);
  killAll();
  process.exit(1);
}, WATCHDOG_MS);
watchdog.unref();
after(() => {
  // the files' own after hooks stop everything and check exit codes first; this is the net
  setTimeout(killAll, 20000).unref();
});

async function stopProc(proc, exited, ms = 30000) {
  if (proc.exitCode !== null || proc.signalCode !== null) return exited;
  proc.kill('SIGTERM');
  const t = setTimeout(() => hardKill(proc), ms);
  const code = await exited;
  clearTimeout(t);
  return code;
}

export async function startRedis(dir) {
  for (let t = 0; ; t++) {
    const port = await freePort();
    const proc = track(spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] }));
    const log = lineLog(proc, 'redis');
    proc.on('error', () => {});
    try {
      await log.wait(/Ready to accept connections/, 15000);
      return { proc, port, url: `redis://127.0.0.1:${port}`, log, stop: () => stopProc(proc, log.exited) };
    } catch (e) {
      await stopProc(proc, log.exited, 2000);
      if (t < 2 && /Address already in use/.test(log.text())) continue;
      throw new Error(`redis-server (${REDIS}) did not start: ${e.message}\n${log.text()}`);
    }
  }
}

// docker/nginx/fogline.conf with its placeholders filled in; fails on any placeholder left.
export function renderNginxTemplate(vars) {
  const text = fs.readFileSync(NGINX_TEMPLATE, 'utf8');
  const out = text.replace(/\$\{([A-Z0-9_]+)\}/g, (m, name) => {
    if (!(name in vars)) throw new Error(`${NGINX_TEMPLATE}: no value for placeholder ${m}`);
    return vars[name];
  });
  return out;
}

// nginx as an ordinary process: everything it writes lives in dir. When the test runs as root,
// nginx's workers run as nobody (nginx refuses to keep root workers without a `user` line).
export async function startNginx(dir, upstreams) {
  fs.chmodSync(dir, 0o755);
  for (let t = 0; ; t++) {
    const port = await freePort();
    fs.writeFileSync(path.join(dir, 'fogline.conf'), renderNginxTemplate({
      FOGLINE_UPSTREAM_A: upstreams[0],
      FOGLINE_UPSTREAM_B: upstreams[1],
      NGINX_LISTEN: `127.0.0.1:${port}`,
    }));
    const root = typeof process.getuid === 'function' && process.getuid() === 0;
    const main = [
      root ? 'user nobody nogroup;' : '',
      'worker_processes 1;',
      'events { worker_connections 1024; }',
      'http {',
      `  access_log ${dir}/access.log;`,
      `  client_body_temp_path ${dir}/client_body;`,
      `  proxy_temp_path ${dir}/proxy;`,
      `  fastcgi_temp_path ${dir}/fastcgi;`,
      `  uwsgi_temp_path ${dir}/uwsgi;`,
      `  scgi_temp_path ${dir}/scgi;`,
      `  include ${dir}/fogline.conf;`,
      '}',
      '',
    ].join('\n');
    const conf = path.join(dir, 'nginx.conf');
    fs.writeFileSync(conf, main);
    const proc = track(spawn(NGINX, ['-p', dir, '-c', conf, '-e', `${dir}/error.log`, '-g',
      `daemon off; pid ${dir}/nginx.pid; error_log ${dir}/error.log notice;`],
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true }), { group: true });
    proc.on('error', () => {});
    const log = lineLog(proc, 'nginx');
    const url = `http://127.0.0.1:${port}`;
    const errorLog = () => { try { return fs.readFileSync(`${dir}/error.log`, 'utf8'); } catch { return ''; } };
    // up when it answers /health (proxied to a replica)
    const end = Date.now() + 15000;
    let up = false;
    while (Date.now() < end && proc.exitCode === null && proc.signalCode === null) {
      try {
        const r = await fetch(`${url}/health`);
        if (r.status === 200) { up = true; break; }
      } catch { /* not listening yet */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (up) {
      return {
        proc, port, url, wsUrl: `ws://127.0.0.1:${port}/ws`, log, errorLog,
        accessLog: () => { try { return fs.readFileSync(`${dir}/access.log`, 'utf8'); } catch { return ''; } },
        stop: () => stopProc(proc, log.exited, 10000),
      };
    }
    await stopProc(proc, log.exited, 2000);
    const why = `${log.text()}\n${errorLog()}`;
    if (t < 2 && /Address already in use/.test(why)) continue;
    throw new Error(`nginx (${NGINX}) did not come up on ${url}: ${why}`);
  }
}

// redis + two replicas (A, B) + nginx. With redis: false the replicas run without --redis.
// hold: the replicas have the engine hold enabled (docs/robustness.md), released at the start.
export async function startTopology({ redis = true, serverArgs = [], hold = false } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fogline-topology-'));
  dirs.add(dir);
  const topo = { dir, redis: null, a: null, b: null, nginx: null };
  try {
    const args = ['--threads', '1', '--log-level', 'info', ...serverArgs];
    if (redis) {
      topo.redis = await startRedis(dir);
      args.push('--redis', topo.redis.url);
    }
    // one at a time: both load the model, and the machine may have two cores
    topo.a = await startServer(args, { hold });
    topo.b = await startServer(args, { hold });
    if (hold) for (const s of [topo.a, topo.b]) await s.release();
    for (const s of [topo.a, topo.b]) track(s.proc);
    topo.nginx = await startNginx(dir, [`127.0.0.1:${topo.a.port}`, `127.0.0.1:${topo.b.port}`]);
  } catch (e) {
    await stopTopology(topo);
    throw e;
  }
  return topo;
}

// Stops everything that still runs (nginx first, then the replicas, then redis) and returns
// each replica's exit code (0 after SIGTERM; the signal name for one a test killed).
export async function stopTopology(topo) {
  const codes = {};
  if (topo.nginx) codes.nginx = await topo.nginx.stop();
  for (const k of ['a', 'b']) if (topo[k]) codes[k] = await topo[k].stop();
  if (topo.redis) codes.redis = await topo.redis.stop();
  if (!process.env.FL_TOPOLOGY_KEEP) fs.rmSync(topo.dir, { recursive: true, force: true });
  dirs.delete(topo.dir);
  return codes;
}

// Which replica ('a' or 'b') logged the submission of request id (ids are unique per test).
// The log arrives on another pipe than the frames, so it is waited for.
export async function servedBy(topo, id, ms = 5000) {
  const re = new RegExp(`event=submitted req="${id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}"`);
  const end = Date.now() + ms;
  for (;;) {
    const who = ['a', 'b'].filter((k) => topo[k].lines.some((l) => re.test(l)));
    if (who.length > 1) throw new Error(`request ${id} was submitted on both replicas`);
    if (who.length === 1) return who[0];
    if (Date.now() > end) throw new Error(`request ${id} was submitted on neither replica (no event=submitted line)`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

// A short random tag, so ids and sessions of one run never collide with another's in Redis.
export const tag = () => Math.random().toString(36).slice(2, 10);
