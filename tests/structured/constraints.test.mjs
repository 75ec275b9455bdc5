// The string and number constraints of the constraint compiler (engine/constrain.c and
// engine/cpauto.c, through `fogline schema`): pattern, format, minLength/maxLength, minimum/
// maximum/exclusiveMinimum/exclusiveMaximum/multipleOf, against npm ajv (unicodeRegExp) with
// ajv-formats in full mode:
// - pattern and minLength/maxLength, on hand-written and 150 random patterns of the supported
//   regex subset (at most 60 characters each): samples are valid and written as JSON.stringify writes them; on samples,
//   random mutations of them, strings a pattern's own syntax tree makes and hand-made ones, the
//   automaton accepts JSON.stringify(s) exactly when ajv finds s valid (both ways); any other
//   way to write a string (\/, \u00e9, \u0008) is rejected;
// - format (date-time, date, time, duration, email, hostname, ipv4, ipv6, uuid, uri): the automaton
//   accepts a subset of what ajv-formats accepts: samples valid, accepted mutations valid, the
//   documented canonical forms accepted, invalid examples rejected;
// - numbers: samples valid and written without exponent, not -0; exact agreement with ajv on
//   integers and decimals around the bounds (at most 15 significant digits, where a double
//   compares as the decimal does), exponents, -0, 01, 1., .5 rejected;
// - refused patterns and keyword misuse: one-line errors naming the keyword and where it is.
// Environment: FL_BIN (the fogline binary).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { require } from '../server/lib.mjs';
import { rng, pick } from './gen.mjs';

const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const ajv = new Ajv({ strict: false, unicodeRegExp: true });
addFormats(ajv, { mode: 'full' });

const BIN = process.env.FL_BIN;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fogline-constraints-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

let files = 0;
function run(schema, args, input) {
  const f = path.join(dir, `s${files++}.json`);
  fs.writeFileSync(f, JSON.stringify(schema));
  return spawnSync(BIN, ['schema', '--schema', f, ...args], { input, encoding: 'utf8', maxBuffer: 64 << 20 });
}

// One `fogline schema` run: n samples of at most maxBytes bytes (texts), then the verdict on
// each of texts (true: accepted).
function session(schema, { n = 0, seed = 1, maxBytes = 300, texts = [] } = {}) {
  const args = n ? ['--sample', String(n), '--seed', String(seed), '--max-bytes', String(maxBytes)] : [];
  const r = run(schema, [...args, '--match'], texts.map((t) => JSON.stringify(t) + '\n').join(''));
  assert.equal(r.status, 0, `fogline schema failed: ${r.stderr}\n${JSON.stringify(schema)}`);
  const lines = r.stdout.split('\n').filter(Boolean);
  assert.equal(lines.length, 1 + n + texts.length, `${r.stdout.slice(0, 2000)}\n${JSON.stringify(schema)}`);
  return { samples: lines.slice(1, 1 + n).map((l) => JSON.parse(l)), accepted: lines.slice(1 + n).map((l) => l === 'true') };
}

const show = (s) => JSON.stringify(s);
// the texts where the automaton and ajv disagree, as one message (the first few)
function disagreements(schema, texts, accepted, expected) {
  const bad = [];
  texts.forEach((t, i) => { if (accepted[i] !== expected[i]) bad.push(`${show(t)}: fogline ${accepted[i]}, ajv ${expected[i]}`); });
  return bad.length ? `${bad.length} of ${texts.length} texts disagree with ajv on ${show(schema)}:\n  ${bad.slice(0, 8).join('\n  ')}` : '';
}
// soundness only: accepted implies valid
function unsound(schema, texts, accepted, valid) {
  const bad = texts.filter((t, i) => accepted[i] && !valid(t));
  return bad.length ? `${bad.length} accepted texts are invalid for ajv on ${show(schema)}: ${bad.slice(0, 8).map(show).join(', ')}` : '';
}

// ---- strings: mutations, and the exact check ----

const cps = (s) => [...s];
// characters mutations insert: the brief's pool, unicode whitespace and line terminators,
// controls, the syntax characters
const POOL = [...'abcxyzAZ0159 "\\\n\té😀-._/+()[]{}*?^$|@:äüßñ', '\u0000', '\u001f', '\u007f', '\u00a0', '\u2028', '\ufeff', '\u{1F602}', 'e\u0301'];
function mutate(r, s, pool) {
  const a = cps(s);
  const times = 1 + Math.floor(r() * 2);
  for (let t = 0; t < times; t++) {
    const k = r(), i = Math.floor(r() * (a.length + 1));
    if (k < 0.3 && a.length) a.splice(Math.min(i, a.length - 1), 1);
    else if (k < 0.6) a.splice(i, 0, pick(r, pool));
    else if (k < 0.9 && a.length) a[Math.min(i, a.length - 1)] = pick(r, pool);
    else if (a.length) { const j = Math.floor(r() * a.length); a.splice(i, 0, ...a.slice(j, j + 1 + Math.floor(r() * 3))); }
  }
  return a.join('');
}
const poolFor = (source) => [...new Set([...POOL, ...cps(source).filter((c) => c !== '\\')])];

// The exact check on a string schema (or a schema with the string at property a): samples valid
// (a plain string written as JSON.stringify writes it); the automaton accepts JSON.stringify of
// every candidate (the given strings, the samples, mutations of them) exactly when ajv finds
// it valid.
function checkStrings(schema, given, seed, { n = 30, maxBytes = 300, mutations = 3, pool = POOL, wrap = false } = {}) {
  const validate = ajv.compile(schema);
  const value = (s) => (wrap ? { a: s } : s);
  const text = (s) => JSON.stringify(value(s));
  const first = session(schema, { n, seed, maxBytes, texts: given.map(text) });
  const strs = first.samples.map((t) => {
    let v;
    assert.doesNotThrow(() => { v = JSON.parse(t); }, `a sample is not JSON: ${show(t)} of ${show(schema)}`);
    assert.ok(validate(v), `a sample is invalid: ${t}\n${show(validate.errors)}\nschema ${show(schema)}`);
    const s = wrap ? v.a : v;
    assert.equal(typeof s, 'string', t);
    if (!wrap) assert.equal(t, JSON.stringify(s), `a sample is not in JSON.stringify's form: ${show(t)}`);
    return s;
  });
  const r = rng(seed * 7919 + 1);
  const more = [...strs, ...strs.flatMap((s) => Array.from({ length: mutations }, () => mutate(r, s, pool)))];
  const second = session(schema, { texts: more.map(text) });
  const all = [...given, ...more], accepted = [...first.accepted, ...second.accepted];
  const msg = disagreements(schema, all.map(text), accepted, all.map((s) => validate(value(s))));
  assert.ok(!msg, msg);
  return { samples: strs, candidates: all, accepted };
}

// ---- hand-written patterns: [pattern, strings that match, strings that do not] ----

const HAND = [
  ['^[A-Z]{2}-\\d{4}$', ['AB-1234', 'ZZ-0000'], ['ab-1234', 'AB-123', 'AB-12345', 'A-1234', 'AB1234', 'AB-1234\n', 'ÄB-1234', 'AB-١٢٣٤']],
  ['^\\+?[0-9 ()-]{7,20}$', ['+1 (555) 123-4567', '1234567', '-------'], ['+123456', '12345678901234567890x', '++1234567', '1'.repeat(21)]],
  ['ab|^cd$', ['ab', 'xxabyy', 'cd', '😀ab'], ['cd ', ' cd', 'a b', 'ba', 'ACD']],
  ['colou?r', ['color', 'colour', 'the colour red', 'colorcolour'], ['colr', 'colouur', 'Color']],
  ['^(?:[a-z0-9]+(?:-[a-z0-9]+)*)$', ['abc', 'a-b-c', 'x1-2y'], ['-a', 'a-', 'a--b', 'A', '', 'a_b']],
  ['^\\S+$', ['abc', 'é😀"\\', 'x'], ['', 'a b', 'a\tb', 'a\u00a0b', 'a\u2028', '\ufeff', 'a\n']],
  ['[^\\x00-\\x7f]', ['é', 'abcé', '😀', '\u0080'], ['', 'abc', '\u007f\u0000']],
  ['^[ä-ü]+$', ['ä', 'öü', 'é', 'ü'], ['a', 'ã', 'ß', 'ý', 'äa', '']],
  ['^(?:\\u{1F600}|[a-z])*$', ['', '😀', 'a😀b😀'], ['😁', 'A', '😀!']],
  ['^a.c$', ['abc', 'a😀c', 'a"c', 'a\\c', 'a\u0085c'], ['ac', 'a\nc', 'a\rc', 'a\u2028c', 'a\u2029c', 'abbc']],
  ['^"[^"\\\\]*"$', ['""', '"abc"', '"é😀"'], ['"a"b"', '"a\\b"', 'abc', '"']],
  ['\\\\', ['\\', 'a\\b'], ['', 'a/b', '"']],
  ['^(foo|bar)+baz$', ['foobaz', 'barfoobarbaz'], ['baz', 'foobazbaz', 'foobar']],
  ['^\\d{3}$|^\\w{1,2}$', ['123', '_a', 'Z', '7'], ['1234', 'abc', '', 'é']],
  ['^.{0,5}$', ['', 'abcde', '😀😀😀😀😀', 'é\u0301'], ['abcdef', 'a\n', '😀😀😀😀😀😀']],
  ['^a*?b+?c??$', ['b', 'aabbc', 'abbb'], ['a', 'ac', 'bcc', 'cb']],
  ['^[\\t\\n\\r\\f\\v\\0]+$', ['\t', '\n\r\f\v\u0000', '\u000b'], ['', ' ', '\u0001', 't']],
  ['^\\x41\\u0042\\u{43}$', ['ABC'], ['abc', 'AB', 'ABCD']],
  ['^[\\w.+-]+@[\\w-]+\\.[a-z]{2,}$', ['john.doe+x@mail-1.com', 'a@b.io'], ['a@b.c', '@b.com', 'a@b.COM', 'é@b.com']],
  ['^(?<year>\\d{4})-(?<month>0[1-9]|1[0-2])$', ['2024-01', '1999-12'], ['2024-13', '2024-00', '24-01', '2024-1']],
  ['^[^\\s"\\\\]{1,8}$', ['abc', 'é😀', '12345678'], ['a b', 'a"', 'a\\', '123456789', '']],
  ['\\.$', ['.', 'a.'], ['a', '.a', 'a.\n']],
  ['^\\/path\\/[a-z]+$', ['/path/x', '/path/abc'], ['/path/', 'path/x', '/path/X']],
  ['^(?:\\d+(?:\\.\\d+)?|\\.\\d+)$', ['1', '12.5', '.5'], ['1.', '.', '1.2.3', '']],
  ['^\\W\\D\\S$', ['-xa', ' ..', 'éé😀'], ['a..', '.1.', '.. ', '..']],
  ['^[\\u00e0-\\u00ff]{2}$', ['àÿ', 'éé'], ['ÿ', 'aé', 'àÿà']],
  ['^$', [''], [' ', 'a']],
  ['a', ['a', 'bab'], ['', 'b', 'A']],
  ['^[\\s\\S]{3}$', ['abc', '\n\n\n', '😀 é'], ['ab', 'abcd']],
  ['^\\s*$', ['', ' \t\n\r\u000b\f', '\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeff'], ['a', '\u200b', '\u0085']],
  ['^[^a-z]*$', ['', 'ABC', '😀\n"'], ['a', 'Az']],
  ['^(?:[01]?\\d|2[0-3]):[0-5]\\d$', ['0:00', '23:59', '09:30'], ['24:00', '12:60', '123:00']],
  ['^.$', ['😀', 'a', '\u0000'], ['', 'ab', '\n', 'e\u0301']],
  ['^[😀-😂]$', ['😀', '😁', '😂'], ['😃', 'a', '😀😀']],
  ['^(?:ab){2,4}$', ['abab', 'abababab'], ['ab', 'ababababab', 'aba']],
  ['^a{3,}b{0,2}$', ['aaa', 'aaaabb'], ['aa', 'aaabbb']],
  ['x+?y*', ['x', 'axyyb'], ['y', '']],
  ['^[\\]\\[\\-\\\\^]+$', [']', '[-\\^'], ['a', '']],
  ['^(a|b|)c$', ['ac', 'c'], ['abc']],
];

test('hand-written patterns: samples valid, exact agreement with ajv on samples, mutations and hand-made strings', () => {
  HAND.forEach(([pattern, yes, no], i) => {
    const schema = { type: 'string', pattern };
    const validate = ajv.compile(schema);
    for (const s of yes) assert.ok(validate(s), `the test's own example does not match ${pattern}: ${show(s)}`);
    for (const s of no) assert.ok(!validate(s), `the test's own counter-example matches ${pattern}: ${show(s)}`);
    checkStrings(schema, [...yes, ...no], i + 1, { pool: poolFor(pattern) });
  });
});

test('patterns at a property: the same agreement', () => {
  for (const [pattern, yes, no] of HAND.slice(0, 6)) {
    const schema = { type: 'object', properties: { a: { type: 'string', pattern } }, required: ['a'], additionalProperties: false };
    checkStrings(schema, [...yes, ...no], 77, { n: 12, wrap: true, pool: poolFor(pattern) });
  }
});

test('repetition counts up to 1000 are supported', () => {
  const schema = { type: 'string', pattern: '^a{1000}$' };
  const { accepted } = session(schema, { texts: ['a'.repeat(1000), 'a'.repeat(999), 'a'.repeat(1001)].map((s) => JSON.stringify(s)) });
  assert.deepEqual(accepted, [true, false, false]);
  const b = { type: 'string', pattern: '^(?:xy){2,1000}z?$' };
  const { samples } = session(b, { n: 5, seed: 3, maxBytes: 400 });
  const v = ajv.compile(b);
  for (const t of samples) assert.ok(v(JSON.parse(t)), t);
});

test('with a string keyword, only JSON.stringify\'s form of a string is accepted', () => {
  const schema = { type: 'string', minLength: 0 };
  const texts = {
    '"é"': true, '"\\u00e9"': false, '"/"': true, '"\\/"': false, '"A"': true, '"\\u0041"': false,
    '"\\b"': true, '"\\u0008"': false, '"\\n"': true, '"\\u000a"': false, '"\\u001f"': true, '"\\u001F"': false,
    '"\\u0000"': true, '"\\u007f"': false, '"\u007f"': true, '"😀"': true, '"\\ud83d\\ude00"': false,
    '"\\""': true, '"\\\\"': true, '"\n"': false, '"\\a"': false, '"\u2028"': true, '"\\u2028"': false,
  };
  const keys = Object.keys(texts);
  for (const k of keys) if (texts[k]) assert.equal(k, JSON.stringify(JSON.parse(k)));
  for (const s of [schema, { type: 'string', pattern: '' }, { type: 'string', maxLength: 5 }]) {
    const { accepted } = session(s, { texts: keys });
    const msg = disagreements(s, keys, accepted, keys.map((k) => texts[k]));
    assert.ok(!msg, msg);
  }
});

// ---- random patterns: a syntax tree, its source, and strings it matches ----

const LITS = [...'abcé"\\017-.😀 \n*($/'];
const SYNTAX = new Set([...'^$\\.*+?()[]{}|/']);
const hex = (c, w) => c.codePointAt(0).toString(16).padStart(w, '0');
function lit(c, form, inClass) {
  if (form === 'x' && c.codePointAt(0) < 0x100) return '\\x' + hex(c, 2);
  if (form === 'u' && c.codePointAt(0) < 0x10000) return '\\u' + hex(c, 4);
  if (form === 'U') return '\\u{' + hex(c, 1) + '}';
  const ctl = { '\t': '\\t', '\n': '\\n', '\r': '\\r', '\f': '\\f', '\v': '\\v' }[c];
  if (ctl) return ctl;
  if (inClass ? '\\]['.includes(c) || c === '^' || c === '-' : SYNTAX.has(c)) return '\\' + c;
  return c;
}
const RANGES = [['a', 'c'], ['0', '5'], ['a', 'é'], ['😀', '😂'], ['"', '\\'], [' ', '/'], ['b', 'b'], ['à', 'ÿ']];
const ESCAPES = ['\\d', '\\w', '\\s', '\\D', '\\W', '\\S'];
let names = 0;
function genAtom(r, d) {
  const k = r();
  if (k < 0.45 || (k >= 0.8 && d <= 0)) return { t: 'lit', c: pick(r, LITS), form: pick(r, ['raw', 'raw', 'raw', 'x', 'u', 'U']) };
  if (k < 0.65) {
    const items = Array.from({ length: 1 + Math.floor(r() * 3) }, () => {
      const j = r();
      if (j < 0.4) return { c: pick(r, LITS), form: pick(r, ['raw', 'raw', 'x', 'U']) };
      if (j < 0.8) return { range: pick(r, RANGES) };
      return { esc: pick(r, ESCAPES) };
    });
    return { t: 'cls', neg: r() < 0.3, items };
  }
  if (k < 0.72) return { t: 'dot' };
  if (k < 0.8) return { t: 'esc', s: pick(r, ESCAPES) };
  return { t: 'grp', kind: pick(r, ['cap', 'nc', 'nc', 'named']), body: genAlt(r, d - 1) };
}
function genQuant(r, d) {
  const atom = genAtom(r, d);
  if (r() < 0.55) return atom;
  const n = Math.floor(r() * 3), m = n + Math.floor(r() * 3);
  const [min, max, q] = pick(r, [[0, Infinity, '*'], [1, Infinity, '+'], [0, 1, '?'], [n, n, `{${n}}`], [n, Infinity, `{${n},}`], [n, m, `{${n},${m}}`]]);
  return { t: 'rep', node: atom, min, max, q: q + (r() < 0.25 ? '?' : '') };
}
const genSeq = (r, d) => ({ t: 'seq', items: Array.from({ length: 1 + Math.floor(r() * 4) }, () => genQuant(r, d)) });
const genAlt = (r, d) => ({ t: 'alt', alts: Array.from({ length: 1 + Math.floor(r() * 2) }, () => genSeq(r, d)) });
// top-level alternatives, each anchored or not at either end; groups two deep; at most 60
// characters of source (longer ones compile to automata of tens of thousands of states)
function genPattern(r) {
  for (;;) {
    const p = Array.from({ length: 1 + Math.floor(r() * 3) }, () => ({ bol: r() < 0.5, seq: genSeq(r, 2), eol: r() < 0.5 }));
    if (patternSrc(p).length <= 60) return p;
  }
}

function src(n) {
  switch (n.t) {
    case 'lit': return lit(n.c, n.form, false);
    case 'cls': return '[' + (n.neg ? '^' : '') + n.items.map((it) => it.esc || (it.range ? lit(it.range[0], 'raw', true) + '-' + lit(it.range[1], 'raw', true) : lit(it.c, it.form, true))).join('') + ']';
    case 'dot': return '.';
    case 'esc': return n.s;
    case 'grp': return (n.kind === 'cap' ? '(' : n.kind === 'nc' ? '(?:' : `(?<g${names++}>`) + src(n.body) + ')';
    case 'rep': return src(n.node) + n.q;
    case 'seq': return n.items.map(src).join('');
    case 'alt': return n.alts.map(src).join('|');
  }
}
const patternSrc = (p) => p.map((a) => (a.bol ? '^' : '') + src(a.seq) + (a.eol ? '$' : '')).join('|');

// characters a class, `.` or an escape is tried on, for strings a pattern matches
const CHARS = [...new Set([...LITS, ...POOL.filter((c) => cps(c).length === 1), ...'bcdABC_é😁😂😃ÿà#~\u0085\u00ad'])];
const atomChars = new Map();
function matchChars(n) {
  const s = src({ ...n, kind: n.kind === 'named' ? 'nc' : n.kind });
  if (!atomChars.has(s)) { const re = new RegExp(`^${s}$`, 'u'); atomChars.set(s, CHARS.filter((c) => re.test(c))); }
  return atomChars.get(s);
}
function genMatch(r, n) {
  switch (n.t) {
    case 'lit': return n.c;
    case 'cls': case 'dot': case 'esc': { const cs = matchChars(n); return cs.length ? pick(r, cs) : ''; }
    case 'grp': return genMatch(r, n.body);
    case 'rep': { const hi = Math.min(n.max, n.min + 3); let s = ''; for (let k = n.min + Math.floor(r() * (hi - n.min + 1)); k > 0; k--) s += genMatch(r, n.node); return s; }
    case 'seq': return n.items.map((it) => genMatch(r, it)).join('');
    case 'alt': return genMatch(r, pick(r, n.alts));
  }
}
const ALPHA = [...'abcé"\\019 \n😀-.x'];
const randomString = (r, len) => Array.from({ length: Math.floor(r() * len) }, () => pick(r, ALPHA)).join('');
function genMatches(r, p, k) {
  return Array.from({ length: k }, () => {
    const a = pick(r, p);
    return (a.bol ? '' : randomString(r, 3)) + genMatch(r, a.seq) + (a.eol ? '' : randomString(r, 3));
  });
}

test('150 random patterns of the subset: samples valid, exact agreement with ajv', () => {
  const r = rng(20260511);
  let valid = 0, total = 0;
  for (let i = 0; i < 150; i++) {
    const p = genPattern(r), pattern = patternSrc(p);
    const schema = { type: 'string', pattern };
    assert.doesNotThrow(() => new RegExp(pattern, 'u'), `the generator made a bad pattern ${pattern}`);
    const given = [...genMatches(r, p, 15), ...Array.from({ length: 25 }, () => randomString(r, 8))];
    const { candidates, accepted } = checkStrings(schema, given, 1000 + i, { n: 15, mutations: 3, pool: poolFor(pattern) });
    valid += accepted.filter(Boolean).length; total += candidates.length;
  }
  // the candidates are both valid and invalid in useful numbers
  assert.ok(valid > total * 0.2 && valid < total * 0.9, `${valid} of ${total} candidates accepted`);
});

// ---- structured_outputs regex: the whole raw text (`fogline schema --regex`) ----

// One run of `fogline schema --regex`: samples, then the verdict on each raw text.
function regexSession(pattern, { n = 0, seed = 1, texts = [] } = {}) {
  const args = ['schema', '--regex', pattern, ...(n ? ['--sample', String(n), '--seed', String(seed), '--max-bytes', '200'] : []), '--match'];
  const r = spawnSync(BIN, args, { input: texts.map((t) => JSON.stringify(t) + '\n').join(''), encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.equal(r.status, 0, `fogline schema --regex failed: ${r.stderr}\n${pattern}`);
  const lines = r.stdout.split('\n').filter(Boolean);
  assert.equal(lines.length, 1 + n + texts.length);
  return { samples: lines.slice(1, 1 + n).map((l) => JSON.parse(l)), accepted: lines.slice(1 + n).map((l) => l === 'true') };
}

test('--regex (structured_outputs): the whole raw text matches, exactly as JavaScript\'s RegExp says', () => {
  const r = rng(31337);
  let valid = 0, total = 0;
  const pats = [...HAND.map(([p]) => p), ...Array.from({ length: 80 }, () => patternSrc(genPattern(r)))];
  pats.forEach((pattern, i) => {
    // vLLM's rule: the reply is a whole match (a ^ or $ at an alternative's end is then true)
    const whole = new RegExp(`^(?:${pattern})$`, 'u');
    const expect = (t) => whole.test(t);
    const first = regexSession(pattern, { n: 10, seed: i + 1 });
    const given = [...first.samples, ...first.samples.flatMap((t) => Array.from({ length: 4 }, () => mutate(r, t, poolFor(pattern)))),
      ...Array.from({ length: 10 }, () => randomString(r, 6))];
    const { accepted } = regexSession(pattern, { texts: given });
    for (const t of first.samples) assert.ok(expect(t), `a sample of ${show(pattern)} does not match whole: ${show(t)}`);
    const msg = disagreements(pattern, given, accepted, given.map(expect));
    assert.ok(!msg, msg);
    valid += accepted.filter(Boolean).length; total += given.length;
  });
  assert.ok(valid > total * 0.2 && valid < total * 0.9, `${valid} of ${total} texts accepted`);
  // raw text: a quote or a backslash is one byte of the reply, not an escape
  assert.deepEqual(regexSession('a"b\\\\c', { texts: ['a"b\\c', 'a\\"b\\\\c'] }).accepted, [true, false]);
  for (const [pattern, re] of [['(?=a)', /lookahead/], ['[]', /matches no text/], ['a{2,1}', /n above m/], ['(?:a', /unterminated group/]]) {
    const res = spawnSync(BIN, ['schema', '--regex', pattern], { encoding: 'utf8' });
    assert.equal(res.status, 1, pattern);
    assert.match(res.stderr.trim(), new RegExp(`^fogline schema: the pattern.*${re.source}`));
  }
});

// ---- minLength / maxLength, alone and with a pattern (code points) ----

test('minLength/maxLength count code points: exact agreement, alone and with a pattern', () => {
  const schemas = [
    { type: 'string', minLength: 2 }, { type: 'string', maxLength: 3 }, { type: 'string', minLength: 1, maxLength: 1 },
    { type: 'string', maxLength: 0 }, { type: 'string', minLength: 3, maxLength: 5 }, { type: 'string', minLength: 40 },
    { type: 'string', minLength: 3, maxLength: 5, pattern: '^[a😀é"\\\\]*$' }, { type: 'string', maxLength: 4, pattern: 'b' },
    { type: 'string', minLength: 2, pattern: '^.$|^..$|^...$' }, { type: 'string', minLength: 1, maxLength: 6, pattern: '^\\d+(?:\\.\\d+)?$' },
    { type: ['string', 'null'], maxLength: 2 },
  ];
  const r = rng(4242);
  const pool = [...'ab 😀é"\\\n.1', '\u0000', '\u{10FFFF}', 'e\u0301', '\u00a0'];
  schemas.forEach((schema, i) => {
    const given = ['', 'a', '😀', 'e\u0301', '😀😀😀😀😀', 'ab😀', 'x'.repeat(39), 'x'.repeat(40), '😀'.repeat(40),
      ...Array.from({ length: 60 }, () => Array.from({ length: Math.floor(r() * 8) }, () => pick(r, pool)).join(''))];
    if (Array.isArray(schema.type)) {
      const validate = ajv.compile(schema);
      const { samples, accepted } = session(schema, { n: 20, seed: 9, texts: ['null', ...given.map((s) => JSON.stringify(s))] });
      for (const t of samples) assert.ok(validate(JSON.parse(t)), t);
      assert.ok(samples.includes('null') && samples.some((t) => t !== 'null'), show(samples));
      const msg = disagreements(schema, ['null', ...given], accepted, [true, ...given.map((s) => validate(s))]);
      assert.ok(!msg, msg);
    } else checkStrings(schema, given, 300 + i, { pool });
  });
});

// ---- formats ----

const lbl63 = 'a'.repeat(63);
const host253 = [lbl63, lbl63, lbl63, 'b'.repeat(61)].join('.');
// fogline's hostname form: a first label of up to 63 characters and up to 7 more of up to 24
const host238 = [lbl63, ...Array(7).fill('b'.repeat(24))].join('.');
const FORMATS = {
  date: {
    valid: ['2024-02-29', '2000-02-29', '2400-02-29', '1900-02-28', '2023-02-28', '1999-12-31', '2023-04-30', '0001-01-01', '9999-12-31', '2021-06-15'],
    invalid: ['2023-02-29', '1900-02-29', '2100-02-29', '2024-13-01', '2024-00-10', '2024-04-31', '2024-01-00', '2024-01-32', '2024-1-01', '24-01-01', '2024/01/01', '2024-01-01T00:00:00Z', ''],
  },
  time: {
    valid: ['23:59:59.123+05:30', '00:00:00Z', '12:34:56Z', '12:34:56.5-08:00', '23:59:59+00:00', '01:02:03.000001Z', '18:30:00-11:45'],
    invalid: ['24:00:00Z', '12:60:00Z', '12:00:61Z', '12:00:60Z', '12:00:00', '12:00Z', '1:00:00Z', '12:00:00+24:00', '12:00:00+05:60', '12:00:00.Z', 'T12:00:00Z'],
  },
  'date-time': {
    valid: ['2024-02-29T23:59:59.123+05:30', '1970-01-01T00:00:00Z', '2000-02-29T12:00:00.000001-11:30', '2023-12-31T23:59:59Z'],
    invalid: ['2023-02-29T00:00:00Z', '2024-01-01T00:00:00', '2024-01-01T24:00:00Z', '2024-01-01', '2024-01-01TT00:00:00Z', '2024-13-01T00:00:00Z'],
  },
  duration: {
    valid: ['P3Y6M4DT12H30M5S', 'PT5M', 'P2W', 'P1D', 'P1Y', 'P1M', 'PT1H', 'PT0S', 'P0D', 'P1Y2M', 'P10DT2H', 'PT36H', 'P1MT1M'],
    invalid: ['P', 'PT', 'P1DT', 'P1.5D', 'PT0.5S', 'P2W1D', 'p1d', '1D', 'PT5M3H', 'P1S', 'P1H', '-P1D', 'P1Y1Y'],
  },
  email: {
    valid: ['a@b.co', 'john.doe@example.com', "x!#$%&'*+/=?^_`{|}~-y@mail.example.org", 'user+tag@sub-domain.example.io', 'A.B@c-d.ef', '1@2.3', `me@${lbl63}.com`],
    invalid: ['a@b', '.a@b.com', 'a.@b.com', 'a..b@c.com', 'a@-b.com', 'a@b-.com', 'a@b..com', '@b.com', 'a@.com', 'a b@c.com', 'a"b@c.com', 'a@b@c.com', 'é@b.com', 'a@b_c.com', ''],
  },
  hostname: {
    valid: ['localhost', 'example.com', 'a-b.c-d.e', 'xn--bcher-kva.example', '123.example', 'a', lbl63 + '.com', host238, 'a1.b2.c3',
      'a.b.c.d.e.f.g.h', `${lbl63}.www.example.com`],
    invalid: ['-a.com', 'a-.com', 'a..com', '', '.com', lbl63 + 'a.com', host253 + 'b', 'a_b.com', 'a b.com', 'é.com', 'a.-b'],
    // valid, but outside the form fogline writes (docs/structured.md, Formats): rejected
    outside: [host253, 'a.b.c.d.e.f.g.h.i', `www.${lbl63}.example.com`, 'example.com.'],
  },
  ipv4: {
    valid: ['0.0.0.0', '255.255.255.255', '192.168.1.1', '10.0.0.254', '1.2.3.4', '100.20.3.99'],
    invalid: ['256.1.1.1', '01.2.3.4', '1.2.3', '1.2.3.4.5', '1.2.3.-1', '1.2.3.04', '1..2.3', '1.2.3.4.', 'a.b.c.d', '300.300.300.300', ''],
  },
  ipv6: {
    valid: ['::1', '::', '2001:db8::8a2e:370:7334', '::ffff:192.0.2.128', 'fe80::', '2001:0db8:85a3:0000:0000:8a2e:0370:7334', '2001:DB8::1', 'FE80::aBcD',
      '1:2:3:4:5:6:7:8', '1::', '1:2:3:4:5:6:7::', '::2:3:4:5:6:7:8', '1:2:3:4:5:6:1.2.3.4', 'fe80::1:2:3:4:5', '::1.2.3.4', '1::8', '1:2::7:8'],
    invalid: ['1:2:3:4:5:6:7:8:9', '1::2::3', '12345::', ':1:2:3:4:5:6:7', '1:2:3:4:5:6:7:', '::ffff:256.1.1.1', '::ffff:01.2.3.4', 'g::1', '1:2:3:4:5:6:7', ':', ':::', '1.2.3.4', ''],
  },
  uri: {
    valid: ['https://example.com', 'https://example.com/a/b?q=1&r=%20x#frag', 'http://localhost:8080/', 'mailto:john.doe@example.com',
      'urn:isbn:0451450523', 'ftp://ftp.is.co.za/rfc/rfc1808.txt', 'file:///etc/hosts', 'a+b.c-d:/x', 'https://x.y/~user/(1)!$&\'*+,;=:@',
      'HTTPS://EXAMPLE.COM/%7E', 'news:comp.infosystems.www.servers.unix', 'https://example.com?', 'x:y#', 'https://a.b/c//d'],
    invalid: ['example.com', '/relative/path', '//example.com', 'https://exa mple.com', 'https://example.com/a b', '1http://x.y', 'http:', ':x',
      'https://example.com/%zz', 'https://example.com/%2', 'https://example.com/\\', 'https://example.com/<x>', 'https://example.com/"', 'é:x', ''],
    // valid, but outside the form fogline writes (docs/structured.md, Formats): rejected
    outside: ['https://user:pw@example.com/', 'http://[::1]:80/', 'http://[v1.x]/', 'https://u@h/'],
  },
  uuid: {
    valid: ['123e4567-e89b-12d3-a456-426614174000', '123E4567-E89B-12D3-A456-426614174000', '00000000-0000-0000-0000-000000000000', 'ffffffff-FFFF-abcd-ABCD-0123456789af'],
    invalid: ['123e4567-e89b-12d3-a456-42661417400', '123e4567e89b12d3a456426614174000', 'g23e4567-e89b-12d3-a456-426614174000', '123e4567-e89b-12d3-a456-4266141740000', '{123e4567-e89b-12d3-a456-426614174000}', ''],
  },
};

test('formats: samples valid (ajv-formats full), documented forms accepted, invalid ones rejected, accepted mutations valid', async (t) => {
  for (const [i, [format, { valid, invalid, outside = [] }]] of Object.entries(FORMATS).entries()) await t.test(format, () => {
    const r = rng(777 + i);
    const schema = { type: 'string', format };
    const validate = ajv.compile(schema);
    for (const s of valid) assert.ok(validate(s), `the test's own ${format} example is invalid for ajv: ${show(s)}`);
    for (const s of invalid) assert.ok(!validate(s), `the test's own ${format} counter-example is valid for ajv: ${show(s)}`);
    for (const s of outside) assert.ok(validate(s), `the test's own ${format} example is invalid for ajv: ${show(s)}`);
    const first = session(schema, { n: 40, seed: 50 + i, maxBytes: 300, texts: [...valid, ...invalid, ...outside].map((s) => JSON.stringify(s)) });
    const strs = first.samples.map((x) => {
      const s = JSON.parse(x);
      assert.ok(typeof s === 'string' && validate(s), `a ${format} sample is invalid: ${x}`);
      assert.equal(x, JSON.stringify(s));
      return s;
    });
    assert.ok(new Set(strs).size > 10, `the ${format} samples hardly differ: ${show(strs)}`);
    const rejected = valid.filter((s, j) => !first.accepted[j]);
    assert.deepEqual(rejected, [], `documented ${format} forms rejected`);
    const acceptedBad = invalid.filter((s, j) => first.accepted[valid.length + j]);
    assert.deepEqual(acceptedBad, [], `invalid ${format} texts accepted`);
    const acceptedOutside = outside.filter((s, j) => first.accepted[valid.length + invalid.length + j]);
    assert.deepEqual(acceptedOutside, [], `${format} texts outside fogline's form accepted`);
    // mutations of samples and of the examples, lowercase and other forms ajv may or may not take
    const pool = [...new Set([...POOL, ...'0123456789abcdefABCDEFtzTZPYMWDHS:.@-+', ...valid.join('')])];
    const muts = [...strs, ...valid, ...invalid].flatMap((s) => Array.from({ length: 5 }, () => mutate(r, s, pool)));
    const extra = [...valid.map((s) => s.toLowerCase()), ...valid.map((s) => s.toUpperCase()), ...valid.map((s) => s + '.'), ...valid.map((s) => ' ' + s),
      '2024-01-01t00:00:00z', '2024-01-01 00:00:00Z', '23:59:60Z', '2016-12-31T23:59:60Z', '12:00:00+0530', '12:00:00+05', 'urn:uuid:123e4567-e89b-12d3-a456-426614174000'];
    const second = session(schema, { texts: [...muts, ...extra].map((s) => JSON.stringify(s)) });
    const msg = unsound(schema, [...muts, ...extra], second.accepted, (s) => validate(s));
    assert.ok(!msg, msg);
  });
});

// a maxLength that the format's automaton cannot count that far (pydantic's HttpUrl says
// 2083) writes shorter values, never invalid ones: samples valid, accepted texts valid, and
// the values it takes are not all short
test('a format with a long maxLength (pydantic HttpUrl, EmailStr): shorter values, all valid', () => {
  const long = (n) => 'https://example.com/' + 'a'.repeat(n - 20);
  for (const [schema, texts, longest] of [
    [{ type: 'string', format: 'uri', minLength: 1, maxLength: 2083 }, ['https://example.com/a', long(100), long(150), long(2000)], 150],
    [{ type: 'string', format: 'email', maxLength: 254 }, ['a@b.co', 'x'.repeat(30) + '@example.com', 'x'.repeat(240) + '@example.com'], 42],
  ]) {
    const validate = ajv.compile(schema);
    const { samples, accepted } = session(schema, { n: 30, seed: 3, maxBytes: 400, texts: texts.map((t) => JSON.stringify(t)) });
    for (const t of samples) assert.ok(validate(JSON.parse(t)), `a sample is invalid for ${show(schema)}: ${t}`);
    const msg = unsound(schema, texts, accepted, (t) => validate(t));
    assert.ok(!msg, msg);
    const took = texts.filter((t, i) => accepted[i]);
    assert.ok(took.some((t) => [...t].length >= longest), `${show(schema)} takes nothing of ${longest} characters: ${show(took)}`);
  }
  // three of them in one object pass the automaton's size with 159 characters each: it is
  // compiled again with less room per string, not refused
  const url = { type: 'string', format: 'uri', minLength: 1, maxLength: 2083 };
  const three = { type: 'object', properties: { a: url, b: url, c: url }, required: ['a', 'b', 'c'], additionalProperties: false };
  const validate = ajv.compile(three);
  const obj = (n) => JSON.stringify({ a: long(n), b: long(n), c: long(n) });
  const { samples, accepted } = session(three, { n: 10, seed: 4, maxBytes: 1000, texts: [obj(40), obj(60), obj(1000)] });
  for (const t of samples) assert.ok(validate(JSON.parse(t)), `a sample is invalid: ${t}`);
  assert.deepEqual(accepted, [true, true, false], 'three URLs of 40 and 60 characters taken, of 1,000 not');
});

// ---- numbers ----

const NUMS = [
  { type: 'integer', minimum: -5, maximum: 17 }, { type: 'number', minimum: 0, maximum: 1 },
  { type: 'number', exclusiveMinimum: 0.25, maximum: 3.5 }, { type: 'integer', minimum: 100 },
  { type: 'number', exclusiveMaximum: -2.5 }, { type: 'integer', multipleOf: 7, minimum: -30, maximum: 30 },
  { type: 'number', multipleOf: 0.25, minimum: -1, maximum: 2 }, { type: 'number', minimum: 1234.5678 },
  { type: 'integer', maximum: 0 }, { type: 'integer', exclusiveMinimum: -3, exclusiveMaximum: 3 },
  { type: 'number', multipleOf: 3 }, { type: 'number', minimum: -0.001, exclusiveMaximum: 0.001 },
  // ajv-formats' number formats (OpenAPI's): int32 an integer within 32 bits, int64 an integer,
  // float and double any number
  { type: 'integer', format: 'int32' }, { type: 'number', format: 'int32', maximum: 10 },
  { type: 'number', format: 'int64', minimum: -7 }, { type: 'number', format: 'double', exclusiveMinimum: 0.5 },
];
const NUMBER_SHAPE = /^-?(?:0|[1-9]\d*)(?:\.\d+)?$/, MINUS_ZERO = /^-0(?:\.0+)?$/;
const fracDigits = (x) => (String(x).split('.')[1] || '').length;
// Candidate texts: integers and decimals around each bound and 0, random ones, big ones; at
// most 15 significant digits, so that ajv's doubles order them as the decimals are ordered.
function numberTexts(r, s) {
  const q = s.multipleOf !== undefined ? fracDigits(s.multipleOf) : 6;
  // (an integer's texts have no fraction: 3.0 is an integer for ajv, and fogline writes 3)
  const whole = s.type === 'integer' || /^int(32|64)$/.test(s.format);
  const digits = whole ? [0] : Array.from({ length: q + 1 }, (_, d) => d);
  const out = new Set();
  if (s.format === 'int32') {
    for (const t of ['2147483647', '2147483648', '-2147483648', '-2147483649', '2147483646', '-2147483647']) out.add(t);
    for (let k = 0; k < 12; k++) out.add(String(2 ** 31 + k * 7919)).add(String(-(2 ** 31) - 1 - k * 104729)).add(String(Math.floor(r() * 9e12)));
  }
  for (const b of [s.minimum, s.maximum, s.exclusiveMinimum, s.exclusiveMaximum, 0, s.multipleOf].filter((x) => x !== undefined))
    for (const d of digits)
      for (let k = -12; k <= 12; k++) out.add((b + k * 10 ** -d).toFixed(d));
  for (let i = 0; i < 150; i++) {
    const d = pick(r, digits), mag = 10 ** Math.floor(r() * 7);
    out.add(((r() - 0.5) * 2 * mag).toFixed(d));
  }
  for (const t of ['123456789012345', '-123456789012345', '99999999999999', '0', '1', '-1']) out.add(t);
  return [...out].filter((t) => !MINUS_ZERO.test(t) && NUMBER_SHAPE.test(t) && t.replace(/^-|\./g, '').replace(/^0+/, '').length <= 15);
}
const NOT_WRITTEN = ['-0', '-0.0', '-0.00', '1e2', '1E2', '2.5e-1', '-1e0', '0e0', '1.0e1', '01', '-01', '00', '1.', '-1.', '.5', '-.5', '+1', '-', '', '0x10', 'NaN', 'Infinity', '1 2', '--1'];

test('numbers: samples valid, exact agreement with ajv around the bounds, exponents and -0 rejected', () => {
  const r = rng(31337);
  NUMS.forEach((schema, i) => {
    const validate = ajv.compile(schema);
    const texts = numberTexts(r, schema);
    const q = schema.multipleOf !== undefined ? fracDigits(schema.multipleOf) : Infinity;
    const { samples, accepted } = session(schema, { n: 40, seed: 200 + i, maxBytes: 300, texts: [...texts, ...NOT_WRITTEN] });
    for (const t of samples) {
      assert.match(t, NUMBER_SHAPE, `a sample of ${show(schema)} is not a plain number: ${t}`);
      assert.doesNotMatch(t, MINUS_ZERO);
      if (schema.type === 'integer' || /^int/.test(schema.format)) assert.match(t, /^-?\d+$/);
      assert.ok(fracDigits(t) <= q, `a sample of ${show(schema)} has more fraction digits than multipleOf: ${t}`);
      assert.ok(validate(JSON.parse(t)), `a sample is invalid: ${t} of ${show(schema)}`);
    }
    assert.ok(new Set(samples).size > 3, show(samples));
    const msg = disagreements(schema, texts, accepted, texts.map((t) => validate(JSON.parse(t))));
    assert.ok(!msg, msg);
    const wrong = NOT_WRITTEN.filter((t, j) => accepted[texts.length + j]);
    assert.deepEqual(wrong, [], `texts of ${show(schema)} that must be rejected are accepted`);
    const v = texts.filter((t) => validate(JSON.parse(t))).length;
    assert.ok(v >= 3 && v < texts.length - 5, `${v} of ${texts.length} candidates valid for ${show(schema)}`);
  });
  // at a property, and beside null
  const o = { type: 'object', properties: { n: { type: 'integer', minimum: -5, maximum: 17 } }, required: ['n'], additionalProperties: false };
  const texts = [-6, -5, 0, 17, 18].map((n) => `{"n":${n}}`);
  assert.deepEqual(session(o, { texts }).accepted, [false, true, true, true, false]);
  const n = { type: ['number', 'null'], minimum: 2.5 };
  assert.deepEqual(session(n, { texts: ['null', '2.5', '2.49', '3', '-3'] }).accepted, [true, true, false, true, false]);
});

// ---- refused ----

const ROOT = /\(at the schema's root\)$/, AT_A = /\(at \/properties\/a\)$/;
const atA = (s) => ({ type: 'object', properties: { a: s }, required: ['a'], additionalProperties: false });
const ERRORS = [
  // the regex subset
  ...['(a)\\1', '(?<n>a)\\k<n>', 'a(?=b)', 'a(?!b)', '(?<=a)b', '(?<!a)b', '\\bfoo', 'a\\B', '\\p{L}', '\\P{Lu}+', 'a^b', 'a$b', '(^a)', '(a$)',
    'a{1001}', 'a{2,1001}', 'a{1001,}', '(a', 'a)', '[a', 'a]b(', '*a', '+', 'a|*', 'a**', '[z-a]', 'a{2,1}', '(?:', '\\']
    .flatMap((p) => [[{ type: 'string', pattern: p }, /pattern/, ROOT], [atA({ type: 'string', pattern: p }), /pattern/, AT_A]]),
  // a count past the limit is named as such (also with more digits than any int holds)
  [{ type: 'string', pattern: 'a{99999999999999999999}' }, /'pattern': a repetition count above 1000/, ROOT],
  [{ type: 'string', pattern: 'a{2,123456}' }, /'pattern': a repetition count above 1000/, ROOT],
  // a NUL inside the pattern's JSON string would cut a C string: the JSON is refused, the
  // pattern never truncated
  [{ type: 'string', pattern: '^a\u0000b$' }, /\\u0000 is not allowed/, /line 1/],
  // keywords on the wrong type or beside enum/const/anyOf/$ref
  [{ type: 'integer', format: 'email' }, /format/, ROOT],
  [{ type: 'string', format: 'int32' }, /'format' needs a 'type' that includes "number" or "integer"/, ROOT],
  [{ pattern: '^a$' }, /pattern/, ROOT],
  [{ type: 'number', minLength: 1 }, /minLength/, ROOT],
  [atA({ type: 'boolean', maxLength: 1 }), /maxLength/, AT_A],
  [{ type: ['integer', 'null'], pattern: 'a' }, /pattern/, ROOT],
  [{ type: 'string', minimum: 1 }, /minimum/, ROOT],
  [atA({ type: 'string', exclusiveMaximum: 1 }), /exclusiveMaximum/, AT_A],
  [{ type: 'boolean', multipleOf: 2 }, /multipleOf/, ROOT],
  [{ maximum: 3 }, /maximum/, ROOT],
  [{ type: 'string', enum: ['a'], pattern: 'a' }, /pattern|enum/, ROOT],
  [{ type: 'string', const: 'a', minLength: 1 }, /minLength|const/, ROOT],
  [atA({ anyOf: [{ type: 'string' }], format: 'date' }), /format|anyOf/, AT_A],
  [{ $defs: { s: { type: 'string' } }, type: 'object', properties: { a: { $ref: '#/$defs/s', pattern: 'a' } }, required: ['a'], additionalProperties: false }, /pattern|\$ref/, AT_A],
  [{ type: 'integer', enum: [1, 2], minimum: 1 }, /minimum|enum/, ROOT],
  // contradictions and bad values
  [{ type: 'string', minLength: 5, maxLength: 2 }, /minLength|maxLength/, ROOT],
  [atA({ type: 'number', minimum: 3, maximum: 2 }), /minimum|maximum/, AT_A],
  [{ type: 'number', multipleOf: 0 }, /multipleOf/, ROOT],
  [atA({ type: 'integer', multipleOf: -2 }), /multipleOf/, AT_A],
  [{ type: 'string', format: 'uri-reference' }, /format/, ROOT],
  [atA({ type: 'string', format: 'iso-date-time' }), /format/, AT_A],
  [{ type: 'string', pattern: 5 }, /pattern/, ROOT],
  [{ type: 'string', minLength: -1 }, /minLength/, ROOT],
  [{ type: 'string', maxLength: 1.5 }, /maxLength/, ROOT],
  [{ type: 'number', exclusiveMinimum: true }, /exclusiveMinimum/, ROOT],
  [{ type: 'number', minimum: '1' }, /minimum/, ROOT],
];

test('refused patterns and keyword misuse: one-line errors naming the keyword and where', () => {
  for (const [schema, re, at] of ERRORS) {
    const r = run(schema, []);
    assert.equal(r.status, 1, `${show(schema)} is not refused: ${r.stdout}${r.stderr}`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^fogline schema: /);
    assert.match(lines[0], re, show(schema));
    assert.match(lines[0], at, show(schema));
    assert.equal(r.stdout, '');
  }
});
