// tok_chat.mjs: fogline's built-in chat renderers against @huggingface/jinja running each model's
// own template, byte for byte, through `fogline tokenize --chat` (and --chat --ids against the
// reference tokenizer on the reference's rendering). Templates: Qwen3's real one, the Qwen2.5-
// Instruct fixture, its "You are a helpful assistant." variant served as chat_template.jinja
// (Fast-dLLM v2's convention), fogline's default-model template, a list-form chat_template, and
// an unrecognised template (a clear load error naming --chat-template; then the override), and
// LLaDA2's Ling template (tests/data/tokenizer/llada2_chat.jinja) in the stand-in tokenizer's
// directory (tests/reference/make_ling_tokenizer.py) with tools, tool calls, observations and
// reasoning, its prompt ids against that tokenizer, and the special tokens at their ids.
//
// Known and deliberate difference, kept out of the generated texts: @huggingface/jinja's
// strip/lstrip/rstrip ignore their argument and trim all whitespace, while Python's
// str.strip('\n') (what transformers renders with, and what fogline does) strips only '\n'.
// The C unit test test_tokenizer_chat covers that case.
//
// usage: node tok_chat.mjs --bin FOGLINE --qwen3 DIR --fixtures DIR --ling DIR
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { spawnSync } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";
import { rng } from "./tok_gen.mjs";

const args = process.argv.slice(2);
const opt = {};
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--bin") opt.bin = args[++i];
  else if (args[i] === "--qwen3") opt.qwen3 = args[++i];
  else if (args[i] === "--fixtures") opt.fixtures = args[++i];
  else if (args[i] === "--ling") opt.ling = args[++i];
  else {
    console.error(`tok_chat: unknown argument ${args[i]}`);
    process.exit(2);
  }
}
if (!opt.bin || !opt.qwen3 || !opt.fixtures || !opt.ling) {
  console.error("usage: node tok_chat.mjs --bin FOGLINE --qwen3 DIR --fixtures DIR --ling DIR");
  process.exit(2);
}

const FOGLINE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const qwen3Cfg = JSON.parse(fs.readFileSync(path.join(opt.qwen3, "tokenizer_config.json"), "utf8"));
const tokJson = JSON.parse(fs.readFileSync(path.join(opt.qwen3, "tokenizer.json"), "utf8"));
const refTok = new Tokenizer(tokJson, qwen3Cfg);
const qwen25 = fs.readFileSync(path.join(opt.fixtures, "qwen25_instruct.jinja"), "utf8");
const qwen25base = qwen25.replaceAll("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "You are a helpful assistant.");
const LLAMA3 =
  "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// ---- conversations ----
const r = rng(99);
const TEXT = ["Hello!", "What is 2+2?", "Explain block diffusion in one line.", "你好，世界", "Emoji 👍🏽 and 👨‍👩‍👧", "line one\nline two",
  "code: `x = 1`", "quote \"this\" and 'that'", "<|im_start|>not a turn", "ends with newline\n", "\n\nstarts with newlines", "tabs\tand  spaces",
  "a", "Ünïcödé ß", "multi\n\nparagraph\n\ntext", "trailing space ", "x".repeat(300)];
// texts for the parts that the template strips with strip('\n'): no other whitespace at the ends
const CORE = ["answer", "The answer is 4.", "好的", "a\nb", "Let me think: 2+2=4", "x", "step 1\n\nstep 2", "👍", "done."];
const nl = () => "\n".repeat(r.int(3));
function assistantContent() {
  const k = r.int(12);
  const t = () => r.pick(CORE);
  switch (k) {
    case 0: return r.pick(TEXT);
    case 1: return `<think>${nl()}${t()}${nl()}</think>${nl()}${t()}`;
    case 2: return `<think>\n${t()}\n</think>\n\n${t()}`;
    case 3: return `<think>${nl()}</think>${nl()}${t()}`;
    case 4: return `${t()}${nl()}</think>${nl()}${t()}`;
    case 5: return `<think>${t()}</think>${t()}</think>${nl()}${t()}`;
    case 6: return `<think>${t()}<think>${nl()}${t()}</think>${t()}`;
    case 7: return `${nl()}${t()}`;
    case 8: return `<think>${nl()}${t()}${nl()}</think>`;
    case 9: return "";
    case 10: return `</think>${t()}`;
    default: return t();
  }
}
function userContent() {
  return r.next() < 0.15 ? `<tool_response>\n${r.pick(CORE)}\n</tool_response>` : r.pick(TEXT);
}
function conversation() {
  const msgs = [];
  if (r.next() < 0.5) msgs.push({ role: "system", content: r.pick(["You are terse.", "Be helpful.\nAnswer in French.", "", "系统提示"]) });
  const turns = 1 + r.int(4);
  for (let i = 0; i < turns; i++) {
    msgs.push({ role: "user", content: userContent() });
    if (r.next() < 0.1) msgs.push({ role: "system", content: "mid-conversation system note" });
    if (i < turns - 1 || r.next() < 0.4) msgs.push({ role: "assistant", content: assistantContent() });
  }
  return msgs;
}
const convs = [
  [{ role: "user", content: "hi" }],
  [{ role: "system", content: "S" }, { role: "user", content: "hi" }],
  [{ role: "user", content: "q1" }, { role: "assistant", content: "<think>\nr1\n</think>\n\na1" }, { role: "user", content: "q2" }, { role: "assistant", content: "<think>\nr2\n</think>\n\na2" }],
  [{ role: "user", content: "q" }, { role: "assistant", content: "<think>r</think>a" }],
  [{ role: "user", content: "q" }, { role: "assistant", content: "a" }, { role: "user", content: "<tool_response>\nx\n</tool_response>" }, { role: "assistant", content: "<think>\nr\n</think>\n\nb" }],
  [{ role: "assistant", content: "<think>\nonly\n</think>\n\nassistant" }],
];
while (convs.length < 160) convs.push(conversation());
const OPTS = [
  { add_generation_prompt: false }, { add_generation_prompt: true },
  { add_generation_prompt: true, enable_thinking: false }, { add_generation_prompt: false, enable_thinking: false },
  { add_generation_prompt: true, enable_thinking: true },
];

// ---- LLaDA2 / Ling: tools, tool calls, observations, reasoning ----
// Texts next to the template's strip('\n') calls come from CORE (see the note at the top); the
// tool JSON has integers only, and no integer-like keys (Python and JavaScript print floats and
// order such keys differently; fogline refuses those, test_tokenizer_chat checks it).
const TOOLS = [
  { type: "function", function: { name: "get_weather", description: "Get the weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", description: "e.g. 北京 or \"Paris\"" },
      days: { type: "integer", minimum: 1, maximum: 14 } }, required: ["city"] } } },
  { type: "function", function: { name: "search", description: "Search the web.\nReturns <b>snippets</b> & links\t\u0001",
    parameters: { type: "object", properties: { q: { type: "string" }, n: { type: "integer", default: -3 },
      safe: { type: "boolean", default: true }, tags: { type: "array", items: { type: "string" } }, x: { type: "null" } } } } },
  { name: "calc", description: "Evaluate 👍 an expression", parameters: { expr: "string", empty: {}, list: [] } },
];
function lingToolCall() {
  const name = r.pick(["get_weather", "search", "calc", "名前", "a\"b\\c"]);
  const args = r.pick([{ city: "Paris" }, { q: "diffusion LM", n: 3, tags: ["a", "b"] }, {}, { nested: { deep: [1, { x: null }] }, flag: false },
    "{\"raw\": \"string arguments\"}", "", { text: "line\nbreak \"quoted\" \\ é" }]);
  const k = r.int(3);
  if (k === 0) return { id: `call_${r.int(1000)}`, type: "function", function: { name, arguments: args } };
  if (k === 1) return { function: { name, arguments: args } };
  return { name, arguments: args };
}
function lingAssistant(last) {
  const m = { role: "assistant" };
  const k = r.int(10);
  if (k < 2) {
    m.content = r.pick(["", ...CORE]);
    m.reasoning_content = r.pick([`${nl()}${r.pick(CORE)}${nl()}`, "", "\n"]);
  } else {
    m.content = assistantContent();
  }
  if (r.next() < 0.35) {
    m.tool_calls = Array.from({ length: 1 + r.int(3) }, lingToolCall);
    if (r.next() < 0.3) m.content = r.pick([null, ""]);
  } else if (r.next() < 0.05) m.tool_calls = [];
  return m;
}
function lingConversation() {
  const msgs = [];
  const k = r.next();
  if (k < 0.5) msgs.push({ role: "system", content: r.pick(["You are terse.", "Be helpful.\nAnswer in French.", "", "系统提示", "detailed thinking on"]) });
  else if (k < 0.55) msgs.push({ role: r.pick(["tool", "assistant"]), content: r.pick(CORE) });
  const turns = 1 + r.int(4);
  for (let i = 0; i < turns; i++) {
    msgs.push({ role: "user", content: userContent() });
    if (r.next() < 0.1) msgs.push({ role: "system", content: "mid-conversation system note" });
    if (i < turns - 1 || r.next() < 0.5) {
      const a = lingAssistant();
      msgs.push(a);
      if (a.tool_calls && a.tool_calls.length) {
        const nres = 1 + r.int(3);
        for (let j = 0; j < nres; j++) msgs.push({ role: "tool", content: r.pick([...CORE, '{"temperature": 21}', "", null]) });
        if (r.next() < 0.6) msgs.push(lingAssistant());
      }
    }
  }
  const line = { messages: msgs };
  const t = r.int(6);
  if (t === 1) line.tools = [];
  else if (t === 2) line.tools = null;
  else if (t >= 3) line.tools = TOOLS.slice(0, 1 + r.int(TOOLS.length));
  return line;
}
const lingConvs = [
  { messages: [{ role: "user", content: "hi" }] },
  { messages: [{ role: "system", content: "S" }, { role: "user", content: "hi" }] },
  { messages: [{ role: "user", content: "Weather in Paris?" }, { role: "assistant", content: "",
    tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: { city: "Paris" } } }] },
    { role: "tool", content: '{"temperature": 21}' }, { role: "tool", content: "sunny" },
    { role: "assistant", content: "<think>\nit is warm\n</think>\n\n21 degrees and sunny." }], tools: TOOLS },
  { messages: [{ role: "user", content: "q" }, { role: "assistant", content: "a", reasoning_content: "r" }] },
  { messages: [{ role: "tool", content: "first" }, { role: "user", content: "<tool_response>\nx\n</tool_response>" },
    { role: "assistant", content: "<think>r</think>a" }] },
];
while (lingConvs.length < 200) lingConvs.push(lingConversation());
// the template sets thinking_option itself: neither kwarg may change the prompt
const LING_OPTS = [
  { add_generation_prompt: false }, { add_generation_prompt: true },
  { add_generation_prompt: true, enable_thinking: true, thinking_option: "on" },
  { add_generation_prompt: false, enable_thinking: false },
];
const lingTemplate = fs.readFileSync(path.join(opt.fixtures, "llada2_chat.jinja"), "utf8");
const lingTok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(opt.ling, "tokenizer.json"), "utf8")),
  JSON.parse(fs.readFileSync(path.join(opt.ling, "tokenizer_config.json"), "utf8")));

// ---- model directories ----
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "fl-chat-"));
function modelDir(name, { config, jinja }) {
  const d = path.join(tmp, name);
  fs.mkdirSync(d);
  fs.symlinkSync(path.resolve(opt.qwen3, "tokenizer.json"), path.join(d, "tokenizer.json"));
  if (config !== undefined) fs.writeFileSync(path.join(d, "tokenizer_config.json"), JSON.stringify(config));
  if (jinja !== undefined) fs.writeFileSync(path.join(d, "chat_template.jinja"), jinja);
  return d;
}
// Qwen2.5's and Qwen3's tools, tool calls and tool results: the same conversations as Ling's,
// with null contents made "" (Python's Jinja writes None where @huggingface/jinja writes
// nothing; fogline's API never passes null)
const qwenToolConvs = lingConvs.map((line) => ({
  ...line,
  messages: line.messages.map((m) => (m.content === null ? { ...m, content: "" } : m)),
}));
const qwen3Dir = modelDir("qwen3", { config: qwen3Cfg });
const qwen25Dir = modelDir("qwen25", { config: { ...qwen3Cfg, chat_template: qwen25 } });
const cases = [
  { name: "qwen3", template: qwen3Cfg.chat_template, dir: qwen3Dir, kind: "qwen3" },
  { name: "qwen3 with tools", template: qwen3Cfg.chat_template, dir: qwen3Dir, kind: "qwen3", lines: qwenToolConvs },
  { name: "qwen2.5-instruct", template: qwen25, dir: qwen25Dir, kind: "chatml" },
  { name: "qwen2.5-instruct with tools", template: qwen25, dir: qwen25Dir, kind: "chatml", lines: qwenToolConvs },
  { name: "qwen2.5-base/fast-dllm-v2 style (chat_template.jinja)", template: qwen25base,
    dir: modelDir("qwen25base", { config: { eos_token: "<|im_end|>" }, jinja: qwen25base }), kind: "chatml" },
  { name: "fogline", template: FOGLINE, dir: modelDir("fogline", { config: { chat_template: FOGLINE } }), kind: "fogline", anyRole: true },
  { name: "list-form chat_template", template: qwen25,
    dir: modelDir("list", { config: { chat_template: [{ name: "tool_use", template: "{{ 1 }}" }, { name: "default", template: qwen25 }] } }), kind: "chatml" },
  { name: "unrecognised template + --chat-template chatml", template: qwen25base, flags: ["--chat-template", "chatml"],
    dir: modelDir("llama3", { config: { chat_template: LLAMA3 } }), kind: "chatml" },
  { name: "llada2 (stand-in tokenizer, template in tokenizer_config.json)", template: lingTemplate, dir: opt.ling,
    kind: "ling", lines: lingConvs, opts: LING_OPTS, tok: lingTok },
  { name: "llada2 template as chat_template.jinja", template: lingTemplate,
    dir: modelDir("ling_jinja", { config: { eos_token: "<|endoftext|>" }, jinja: lingTemplate }), kind: "ling",
    lines: lingConvs.slice(0, 60), opts: LING_OPTS },
  { name: "unrecognised template + --chat-template ling", template: lingTemplate, flags: ["--chat-template", "ling"],
    dir: path.join(tmp, "llama3"), kind: "ling", lines: lingConvs.slice(0, 60), opts: LING_OPTS },
];

let failures = 0;
const show = (s) => JSON.stringify(s.length > 300 ? s.slice(0, 300) + "…" : s);

// The unrecognised template alone must fail to load, in one line, naming the override.
{
  const res = spawnSync(opt.bin, ["tokenize", "--model", cases.find((c) => c.name.startsWith("unrecognised template + --chat-template chatml")).dir, "--chat"], { input: '[{"role":"user","content":"hi"}]\n' });
  const err = res.stderr.toString();
  if (res.status !== 1 || !err.includes("--chat-template") || err.trim().split("\n").length !== 1) {
    console.log(`unrecognised template: expected exit 1 and one line naming --chat-template, got ${res.status}: ${show(err)}`);
    failures++;
  } else console.log(`unrecognised template: rejected as expected: ${err.trim()}`);
}

for (const c of cases) {
  const tpl = new Template(c.template);
  const lines = [], expect = [];
  for (const line of c.lines || convs.map((messages) => ({ messages }))) {
    let msgs = line.messages;
    if (c.anyRole && r.next() < 0.2) msgs = [...msgs, { role: "developer", content: "any role renders" }];
    for (const o of c.opts || OPTS) {
      const ctx = { ...line, messages: msgs, ...o };
      expect.push(tpl.render(ctx));
      lines.push(JSON.stringify(ctx));
    }
  }
  const flags = c.flags || [];
  const res = spawnSync(opt.bin, ["tokenize", "--model", c.dir, "--chat", ...flags], { input: lines.join("\n") + "\n", maxBuffer: 1 << 28 });
  if (res.status !== 0) {
    console.log(`${c.name}: fogline tokenize --chat failed (${res.status}): ${res.stderr}`);
    failures++;
    continue;
  }
  const got = res.stdout.toString().trimEnd().split("\n").map((l) => JSON.parse(l));
  let bad = 0;
  for (let i = 0; i < expect.length; i++)
    if (got[i] !== expect[i]) {
      if (bad < 4) console.log(`  ${c.name} #${i} ${lines[i].slice(0, 200)}\n    ours ${show(got[i] ?? "<missing>")}\n    ref  ${show(expect[i])}`);
      bad++;
    }
  // ids of the prompt: ours (--chat --ids) against the reference tokenizer on the reference text
  const sub = lines.filter((_, i) => i % 7 === 0);
  const ids = spawnSync(opt.bin, ["tokenize", "--model", c.dir, "--chat", "--ids", ...flags], { input: sub.join("\n") + "\n", maxBuffer: 1 << 28 });
  const gotIds = ids.status === 0 ? ids.stdout.toString().trimEnd().split("\n") : [];
  let badIds = 0;
  sub.forEach((_, k) => {
    const want = JSON.stringify((c.tok || refTok).encode(expect[k * 7], { add_special_tokens: false }).ids);
    if (gotIds[k] !== want) {
      if (badIds < 2) console.log(`  ${c.name} ids #${k * 7}: ours ${(gotIds[k] || "<missing>").slice(0, 200)} ref ${want.slice(0, 200)}`);
      badIds++;
    }
  });
  if (ids.status !== 0) console.log(`  ${c.name}: --chat --ids failed: ${ids.stderr}`);
  console.log(`${c.name} [${c.kind}]: ${expect.length} renderings ${bad ? bad + " DIFFER" : "identical"}, ` +
    `${sub.length} prompt id lists ${badIds || ids.status ? (badIds || "all") + " DIFFER" : "identical"}`);
  failures += bad + badIds + (ids.status ? 1 : 0);
}
// The stand-in's special tokens sit at LLaDA2's ids, for fogline and the reference alike.
{
  const SPECIAL = { "<|startoftext|>": 156891, "<|endoftext|>": 156892, "[CLS]": 156893, "[gMASK]": 156894,
    "<|mask|>": 156895, "<role>": 157151, "</role>": 157152, "<|role_end|>": 157183 };
  const texts = [...Object.keys(SPECIAL), "<role>HUMAN</role>hi<|role_end|><role>ASSISTANT</role><|mask|><|mask|>",
    "detailed thinking off<|role_end|>", "a<|endoftext|>b", "<|mask|"];
  const res = spawnSync(opt.bin, ["tokenize", "--model", opt.ling], { input: texts.map((t) => JSON.stringify(t)).join("\n") + "\n" });
  const got = res.status === 0 ? res.stdout.toString().trimEnd().split("\n") : [];
  let bad = 0;
  texts.forEach((t, i) => {
    const want = lingTok.encode(t, { add_special_tokens: false }).ids;
    const exp = SPECIAL[t] !== undefined ? [SPECIAL[t]] : want;
    if (got[i] !== JSON.stringify(want) || JSON.stringify(want) !== JSON.stringify(exp)) {
      console.log(`  special ${JSON.stringify(t)}: ours ${got[i] ?? "<missing>"} ref ${JSON.stringify(want)} expected ${JSON.stringify(exp)}`);
      bad++;
    }
  });
  if (res.status !== 0) console.log(`  stand-in tokenize failed: ${res.stderr}`);
  console.log(`llada2 stand-in: ${texts.length} texts with special tokens ${bad || res.status ? "DIFFER" : "identical, at LLaDA2's ids"}`);
  failures += bad + (res.status ? 1 : 0);
}
fs.rmSync(tmp, { recursive: true, force: true });
process.exit(failures ? 1 : 0);
