// Loads a tokenizer.json/tokenizer_config.json pair with @huggingface/tokenizers (npm, from
// tests/node) and checks, for each case in the input file, that
//   - the chat template (rendered by @huggingface/jinja) equals the Python rendering, and
//   - the encoding (no extra special tokens) equals the Python encoder's ids, and decodes back.
// Usage: node check_tokenizer.mjs MODEL_DIR CASES.json   (written by check_tokenizer.py)
import { createRequire } from "module";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "..", "tests", "node", "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");
const { Template } = require("@huggingface/jinja");

const [dir, casesFile] = process.argv.slice(2);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);
const tmpl = new Template(tc.chat_template);
const cases = JSON.parse(fs.readFileSync(casesFile, "utf8"));
let bad = 0;
for (const [i, c] of cases.entries()) {
  const rendered = tmpl.render({ messages: c.messages, add_generation_prompt: c.add_generation_prompt });
  if (rendered !== c.text) {
    if (bad++ < 5) console.log(`case ${i}: template differs\n  js: ${JSON.stringify(rendered)}\n  py: ${JSON.stringify(c.text)}`);
    continue;
  }
  const ids = tok.encode(c.text, { add_special_tokens: false }).ids;
  const same = ids.length === c.ids.length && ids.every((v, k) => v === c.ids[k]);
  if (!same) {
    if (bad++ < 5) console.log(`case ${i}: ids differ\n  js: ${ids}\n  py: ${c.ids}\n  ${JSON.stringify(c.text)}`);
    continue;
  }
  const back = tok.decode(ids, { skip_special_tokens: false });
  if (back !== c.text) {
    if (bad++ < 5) console.log(`case ${i}: decode differs: ${JSON.stringify(back)}`);
  }
}
console.log(`${cases.length - bad}/${cases.length} cases agree`);
process.exit(bad ? 1 : 0);
