// tok_bench_ref.mjs: the reference side of `fogline bench tokenizer`: encodes a text file with
// @huggingface/tokenizers (the model's tokenizer.json), times a cold run and the best of N, writes
// the ids as little-endian int32 and prints the timings as one JSON line.
// usage: node tok_bench_ref.mjs MODEL_DIR TEXT_FILE IDS_OUT RUNS
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
import path from "path";

const [dir, textFile, idsFile, runsArg] = process.argv.slice(2);
if (!dir || !textFile || !idsFile) {
  console.error("usage: node tok_bench_ref.mjs MODEL_DIR TEXT_FILE IDS_OUT RUNS");
  process.exit(2);
}
const runs = Math.max(1, Number(runsArg || 3));
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
let t0 = performance.now();
const tok = new Tokenizer(tj, cfg);
const loadMs = performance.now() - t0;
const text = fs.readFileSync(textFile, "utf8");
t0 = performance.now();
let ids = tok.encode(text, { add_special_tokens: false }).ids;
const coldMs = performance.now() - t0;
let bestMs = Infinity;
for (let i = 0; i < runs; i++) {
  t0 = performance.now();
  ids = tok.encode(text, { add_special_tokens: false }).ids;
  bestMs = Math.min(bestMs, performance.now() - t0);
}
fs.writeFileSync(idsFile, Buffer.from(Int32Array.from(ids).buffer));
console.log(JSON.stringify({ load_ms: loadMs, cold_ms: coldMs, best_ms: bestMs, n: ids.length, node: process.version }));
