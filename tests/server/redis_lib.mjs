// A real redis-server for tests (started on a free port, killed when the test file ends) and
// redis-cli helpers; used by redis.test.mjs and faults.test.mjs.
import { after } from 'node:test';
import { spawn, execFile } from 'node:child_process';
import { freePort, until } from './lib.mjs';

const REDIS = process.env.FL_REDIS_SERVER || 'redis-server';
const CLI = process.env.FL_REDIS_CLI || 'redis-cli';
const redises = new Set();
after(() => { for (const p of redises) p.kill('SIGKILL'); });

// port: 0 picks a free one; extra: more redis-server flags.
export async function startRedis(port = 0, extra = []) {
  port = port || (await freePort());
  const p = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  redises.add(p);
  p.on('exit', () => redises.delete(p));
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  await until(() => /Ready to accept connections/.test(out) || p.exitCode !== null, 10000, 'redis-server to start');
  if (p.exitCode !== null) throw new Error(`redis-server failed: ${out}`);
  return { proc: p, port, url: `redis://127.0.0.1:${port}` };
}

export function cli(port, args, encoding = 'utf8') {
  return new Promise((resolve, reject) => {
    execFile(CLI, ['-p', String(port), ...args], { encoding, maxBuffer: 64 << 20 }, (err, out) =>
      err ? reject(err) : resolve(out));
  });
}

// Keys matching pattern, without the page-eviction index.
export const scan = async (port, pattern) =>
  (await cli(port, ['--scan', '--pattern', pattern])).split('\n').filter((k) => k && k !== 'fogline:kv:lru');

// Waits until the key count stops moving (the server's page writes have landed).
export async function settled(port, ms = 20000) {
  let last = -1;
  let same = 0;
  await until(async () => {
    const n = Number((await cli(port, ['DBSIZE'])).trim());
    same = n === last ? same + 1 : 0;
    last = n;
    return same >= 4;
  }, ms, 'page writes to settle');
  return last;
}
