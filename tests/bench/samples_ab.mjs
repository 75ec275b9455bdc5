// Benchmark: OpenAI's n. Eight choices of one prompt asked as one request (n = 8: eight branches
// decoded in the same forward passes) against the same eight choices asked as eight requests one
// after another (a client without n) and as eight concurrent requests, side by side in one run,
// each configuration on a prompt of its own (a distinct opening word, so no configuration finds
// another's pages in the prefix cache; within one, all three compute the prompt's whole blocks
// once and share them: the "cached" column). Choice i of n = 8 is exactly the lone request with
// seed + i (tests/server/completions.test.mjs), so the three produce the same text.
//
//   FL_BIN=build/server/fogline node tests/bench/samples_ab.mjs [--model DIR] [--rounds N]
//        [--n N] [--max-tokens N]
// The model defaults to the built-in one.
import { startServer, require } from '../server/lib.mjs';

const OpenAI = require('openai').default;
const args = process.argv.slice(2);
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const rounds = Number(opt('--rounds', '3'));
const n = Number(opt('--n', '8'));
const maxTokens = Number(opt('--max-tokens', '64'));
const model = opt('--model', '');

// ~400 tokens of policy text; tag makes each configuration's prompt its own from the first token
function system(tag) {
  const parts = [`${tag}.`];
  for (let i = 1; parts.join(' ').length < 1600; i++)
    parts.push(`Policy ${i}: orders over ${i * 7} dollars ship free within ${i % 5 + 2} days.`);
  return parts.join(' ');
}

const server = await startServer(['--max-seqs', String(Math.max(16, n))], { model });
const client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
const req = (tag, extra) => ({
  model: 'fogline', max_tokens: maxTokens, temperature: 1.0, seed: 7,
  messages: [{ role: 'system', content: system(tag) }, { role: 'user', content: 'Can I return a blender?' }],
  ...extra,
});

async function timed(fn) {
  const t0 = performance.now();
  const r = await fn();
  return { ms: performance.now() - t0, ...r };
}

const sum = (rs, k) => rs.reduce((a, r) => a + r.usage[k], 0);
const cachedOf = (u) => u.prompt_tokens_details?.cached_tokens ?? 0;
const rows = { one: [], seq: [], conc: [] };
for (let r = 0; r < rounds; r++) {
  const one = await timed(async () => {
    const x = await client.chat.completions.create(req(`Shop A${r}`, { n }));
    return { tokens: x.usage.completion_tokens, prompt: x.usage.prompt_tokens, cached: cachedOf(x.usage) };
  });
  const seq = await timed(async () => {
    const xs = [];
    for (let i = 0; i < n; i++) xs.push(await client.chat.completions.create(req(`Shop S${r}`, { seed: 7 + i })));
    return { tokens: sum(xs, 'completion_tokens'), prompt: sum(xs, 'prompt_tokens'),
      cached: xs.reduce((a, x) => a + cachedOf(x.usage), 0) };
  });
  const conc = await timed(async () => {
    const xs = await Promise.all([...Array(n).keys()].map((i) =>
      client.chat.completions.create(req(`Shop C${r}`, { seed: 7 + i }))));
    return { tokens: sum(xs, 'completion_tokens'), prompt: sum(xs, 'prompt_tokens'),
      cached: xs.reduce((a, x) => a + cachedOf(x.usage), 0) };
  });
  rows.one.push(one);
  rows.seq.push(seq);
  rows.conc.push(conc);
}
await server.stop();

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`fogline n=${n} choices of one chat, max_tokens ${maxTokens}, temperature 1.0, ` +
  `median of ${rounds} rounds (each configuration on its own prompt)\n`);
console.log('| configuration | ms | choices/s | tokens/s | prompt tokens | cached | vs sequential |');
console.log('|---|---|---|---|---|---|---|');
const seqMs = median(rows.seq.map((x) => x.ms));
for (const [name, rs] of [[`one request, n = ${n}`, rows.one], [`${n} requests, one after another`, rows.seq],
  [`${n} requests at once`, rows.conc]]) {
  const ms = median(rs.map((x) => x.ms));
  const tok = median(rs.map((x) => x.tokens));
  console.log(`| ${name} | ${ms.toFixed(0)} | ${(n / ms * 1e3).toFixed(1)} | ${(tok / ms * 1e3).toFixed(0)} | ` +
    `${rs[0].prompt} | ${rs[0].cached} | ${(seqMs / ms).toFixed(2)}x |`);
}
