// tok_gen.mjs: deterministic test strings for the tokenizer parity tests: English with
// contractions, CJK, emoji with ZWJ and skin tones, code, whitespace and newline runs, \r\n,
// digits of several scripts, combining marks (NFC changes), special-token text, random
// "soup" from well-established Unicode blocks, long words, and invalid UTF-8.
//
// Kept out on purpose (documented in docs/tokenizer.md): characters assigned after Unicode 13
// (PCRE2 here knows Unicode 14, utf8proc 15, node's ICU 15.1) and U+017F after an apostrophe
// (PCRE2's caseless (?i:'s) matches it, as Oniguruma does; the JS reference folds ASCII only).

export function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (arr) => arr[int(arr.length)];
  return { next, int, pick };
}

const WORDS = (
  "the of and to in is you that it he was for on are as with his they at be this have from or one " +
  "had by word but not what all were we when your can said there use an each which she do how their " +
  "if will up other about out many then them these so some her would make like him into time has look " +
  "two more write go see number no way could people my than first water been call who oil its now find " +
  "long down day did get come made may part tokenizer diffusion block cache latency throughput model " +
  "Hello World OpenAI Qwen HuggingFace JavaScript München naïve café résumé Zürich façade coöperate " +
  "don't won't can't I'm you're we've they'll she'd it's Let's O'Neil rock'n'roll"
).split(" ");
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'x", "'"];
const CJK =
  "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从".split(
    ""
  );
const JA = "ひらがなカタカナ日本語の文章を書きますテストですこんにちは世界ありがとうございますトークナイザー".split("");
const KO = "안녕하세요한국어문장토크나이저테스트입니다감사합니다세계".split("");
const EMOJI = [
  "😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "👋🏻", "❤️", "❤", "🔥", "✨", "🎉", "🚀", "🌍", "🇫🇷", "🇯🇵", "1️⃣", "#️⃣",
  "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑‍🤝‍🧑", "🏳️‍🌈", "👁️‍🗨️", "🤷‍♂️", "🙋🏾‍♀️", "☕", "⚽", "♻️", "©️", "™",
];
const CODE = [
  "def foo(x, y=2):\n    return x ** y  # square\n",
  "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
  "const f = async (a) => { await g(a?.b ?? 0); };",
  "if x != None and len(xs) >= 10:\n        print(f\"{x!r}\")",
  "SELECT id, name FROM users WHERE age > 21 ORDER BY name;",
  "<div class=\"a\"><span>Hi</span></div>",
  "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
  "x = [1, 2, 3]\ny = {k: v for k, v in zip(a, b)}",
  "    \t  indented\t\ttabs  ",
  "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&&i||!j",
  "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  "```python\nprint('hi')\n```",
];
const WS = [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", "  \n  ", "\t\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e", "\u200b", "\ufeff", "\u2003", "\u202f", "\u000b", "\u000c", "\r", " \r\n "];
const DIGITS = ["0", "7", "42", "2024", "3.14159", "1,000,000", "0x1F", "1e-9", "٣٤٥", "३४५", "３４５", "²", "½", "Ⅻ", "①", "𝟙𝟚𝟛", "12345678901234567890", "-273.15", "v1.2.3"];
const MARKS = [
  "e\u0301", "a\u0300", "A\u030a", "\u212b", "\u2126", "o\u0308\u0304", "n\u0303", "c\u0327", "ệ", "e\u0323\u0302",
  "\u1100\u1161\u11a8", "\u1112\u1161\u11ab", "가\u11a8", "\uf900", "\uf9d6", "\ufb01", "ﬃ", "x\u0301\u0327", "q\u0307\u0323",
  "Z\u0351\u036b\u0343\u036a\u0302\u036b", "\u0928\u093f", "\u0915\u094d\u0937", "\u0645\u064e\u0631\u0652", "\u0e01\u0e34\u0e48",
  "\u0b47\u0b3e", "\u0cc6\u0cd5", "\u0dd9\u0dcf\u0dca", "\u00c5\u0301", "\u1e9b\u0323", "\u0344", "\u0958", "\u2000",
];
const POOLS = [
  [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17e], [0x391, 0x3c9], [0x410, 0x44f], [0x300, 0x36f], [0x5d0, 0x5ea],
  [0x621, 0x652], [0x905, 0x94d], [0xe01, 0xe3a], [0xac00, 0xd7a3], [0x1100, 0x1112], [0x1161, 0x1175],
  [0x11a8, 0x11c2], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0xf900, 0xfa0d], [0xff01, 0xff5e],
  [0x2010, 0x2027], [0x2030, 0x205e], [0x660, 0x669], [0x966, 0x96f], [0x2150, 0x2188], [0x1f600, 0x1f64f],
  [0x1f300, 0x1f5ff], [0x1f680, 0x1f6c5], [0x2600, 0x26ff], [0x1f3fb, 0x1f3ff], [0x1d400, 0x1d6a3],
  [0x0, 0x1f], [0x7f, 0x9f], [0xe000, 0xe0ff], [0x2000, 0x200f], [0xfe00, 0xfe0f], [0x1f1e6, 0x1f1ff],
];

function soup(r, n) {
  let s = "";
  for (let i = 0; i < n; i++) {
    const [a, b] = r.pick(POOLS);
    s += String.fromCodePoint(a + r.int(b - a + 1));
  }
  return s.replace(/'\u017f/g, "'s");
}

function sentence(r) {
  const n = 3 + r.int(14);
  let s = "";
  for (let i = 0; i < n; i++) {
    let w = r.pick(WORDS);
    if (r.next() < 0.15) w = w[0].toUpperCase() + w.slice(1);
    if (r.next() < 0.08) w = w.toUpperCase();
    if (r.next() < 0.12) w += r.pick(CONTRACTIONS);
    s += (i ? " " : "") + w;
    if (r.next() < 0.1) s += r.pick([",", ";", ":", " -", "...", "!?", " (", ")"]);
  }
  return s + r.pick([".", "!", "?", "", "\n", ".\n\n", "!!!"]);
}

function mixed(r, pieces) {
  let s = "";
  for (let i = 0; i < pieces; i++) {
    const k = r.int(11);
    if (k < 3) s += sentence(r);
    else if (k === 3) s += Array.from({ length: 1 + r.int(12) }, () => r.pick(CJK)).join("");
    else if (k === 4) s += Array.from({ length: 1 + r.int(10) }, () => r.pick(r.next() < 0.5 ? JA : KO)).join("");
    else if (k === 5) s += r.pick(EMOJI) + (r.next() < 0.5 ? r.pick(EMOJI) : "");
    else if (k === 6) s += r.pick(CODE);
    else if (k === 7) s += r.pick(WS);
    else if (k === 8) s += r.pick(DIGITS);
    else if (k === 9) s += r.pick(MARKS);
    else s += soup(r, 1 + r.int(6));
    if (r.next() < 0.5) s += r.pick(WS);
  }
  return s;
}

// Text with the tokenizer's own added tokens (and near misses) written in it.
function withSpecials(r, specials) {
  const near = ["<|im_start", "<|im_start|", "im_start|>", "<|", "|>", "<<|im_end|>>", "<think", "</think", "<|endoftext|"];
  let s = "";
  const n = 1 + r.int(6);
  for (let i = 0; i < n; i++) {
    const k = r.int(5);
    if (k < 2) s += r.pick(specials);
    else if (k === 2) s += r.pick(near);
    else s += mixed(r, 1);
    if (r.next() < 0.3) s += r.pick(["\n", " ", "", "user\n", "assistant\n"]);
  }
  return s;
}

function longOne(r) {
  const k = r.int(6);
  if (k === 0) return "a".repeat(65 + r.int(400));
  if (k === 1) return Array.from({ length: 70 + r.int(300) }, () => String.fromCharCode(97 + r.int(26))).join("");
  if (k === 2) return Array.from({ length: 30 + r.int(200) }, () => r.pick(CJK)).join("");
  if (k === 3) return " ".repeat(50 + r.int(500)) + "x";
  if (k === 4) return "Donaudampfschifffahrtsgesellschaftskapitänswitwenrentenversicherung".repeat(1 + r.int(5));
  return mixed(r, 40 + r.int(60));
}

const FIXED = [
  "", " ", "  ", "\n", "\r\n", "a", "A", "'", "''", "'s", "don't", "DON'T", "I'll've", "\t", "0", "00", "000",
  "Hello world", " Hello world", "Hello  world ", "hello\nworld", "x\r\ny", "   leading", "trailing   ",
  "\n\n\nnewlines", "a\u00a0b", "\u3000\u3000全角", "ça va? ÇA VA!", "naïve (nai\u0308ve)", "Å vs A\u030a vs \u212b",
  "e\u0301\u0301", "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8", "👨‍👩‍👧‍👦 family", "👍🏽👍🏿", "🇺🇳🇪🇺",
  "1234567890", "3.14", "٣.١٤", "x²+y²", "\u0000", "a\u0000b", "\u0085next line", "\u2028sep", "tab\there",
];

// Returns [{label, text}] (valid strings) and [{label, bytes}] (byte strings, some invalid).
export function generate(count, specials, seed = 20240601) {
  const r = rng(seed);
  const out = FIXED.map((t, i) => ({ label: `fixed${i}`, text: t }));
  const kinds = ["en", "en", "cjk", "emoji", "code", "ws", "digits", "marks", "special", "soup", "mixed", "mixed", "long"];
  while (out.length < count) {
    const kind = kinds[out.length % kinds.length];
    let t;
    switch (kind) {
      case "en": t = Array.from({ length: 1 + r.int(4) }, () => sentence(r)).join(r.pick([" ", "\n", "\n\n"])); break;
      case "cjk": t = mixed(r, 1) + Array.from({ length: 2 + r.int(30) }, () => r.pick(r.next() < 0.6 ? CJK : r.next() < 0.5 ? JA : KO)).join("") + r.pick(["。", "，", "！", "？", "", " "]); break;
      case "emoji": t = Array.from({ length: 1 + r.int(8) }, () => r.pick(EMOJI) + (r.next() < 0.3 ? r.pick(WS) : "")).join(r.next() < 0.5 ? "" : " "); break;
      case "code": t = Array.from({ length: 1 + r.int(4) }, () => r.pick(CODE)).join(r.pick(["", "\n", "\n\n"])); break;
      case "ws": t = Array.from({ length: 1 + r.int(8) }, () => r.pick(WS) + (r.next() < 0.5 ? r.pick(WORDS) : "")).join(""); break;
      case "digits": t = Array.from({ length: 1 + r.int(6) }, () => r.pick(DIGITS)).join(r.pick(["", " ", ", ", "+"])); break;
      case "marks": t = Array.from({ length: 1 + r.int(6) }, () => r.pick(MARKS) + (r.next() < 0.5 ? r.pick(WORDS) : "")).join(r.pick(["", " "])); break;
      case "special": t = specials.length ? withSpecials(r, specials) : mixed(r, 3); break;
      case "soup": t = soup(r, 1 + r.int(40)); break;
      case "long": t = longOne(r); break;
      default: t = mixed(r, 2 + r.int(8));
    }
    out.push({ label: `${kind}${out.length}`, text: t });
  }
  return out;
}

// Byte strings: valid text with invalid UTF-8 put in (lone continuation bytes, truncated
// sequences, overlongs, surrogates, bytes above F4), at random places, even inside characters.
export function generateBytes(count, seed = 777) {
  const r = rng(seed);
  const bad = [[0x80], [0xbf], [0xc0, 0xaf], [0xc1, 0xbf], [0xe2, 0x82], [0xe2], [0xf0, 0x9f, 0x98], [0xf0, 0x9f],
    [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xfe], [0xe0, 0x80, 0x80],
    [0xf0, 0x80, 0x80, 0x80], [0xc2], [0xc2, 0x41], [0xe2, 0x28, 0xa1], [0xf8, 0x88, 0x80, 0x80, 0x80]];
  const out = [];
  for (let i = 0; i < count; i++) {
    const base = Buffer.from(mixed(r, 1 + r.int(4)), "utf8");
    const parts = [];
    let pos = 0;
    const cuts = 1 + r.int(3);
    for (let c = 0; c < cuts; c++) {
      const at = pos + r.int(Math.max(1, base.length - pos + 1));
      parts.push(base.subarray(pos, Math.min(at, base.length)));
      parts.push(Buffer.from(r.pick(bad)));
      pos = Math.min(at, base.length);
    }
    parts.push(base.subarray(pos));
    out.push({ label: `bytes${i}`, bytes: Buffer.concat(parts) });
  }
  return out;
}
