// The constraint compiler (engine/constrain.c, through `fogline schema`) against a real JSON
// Schema validator (npm ajv) and JSON.parse, on hand-written schemas and a few hundred random
// ones of the supported subset:
// - sound: every text the automaton samples parses, and ajv finds it valid;
// - complete for the schema's order: random valid instances, written compactly, with
//   indentation and with odd whitespace, are accepted; broken ones (a required property left
//   out, a value of another type, a cut text) are rejected, and ajv rejects them too;
// - response_format json_object: samples are JSON objects;
// - schemas outside the subset get one-line errors naming the keyword and where it is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { require } from '../server/lib.mjs';
import { rng, pick, WORDS, genSchema } from './gen.mjs';

const Ajv = require('ajv');
const Ajv2020 = require('ajv/dist/2020'); // (prefixItems is JSON Schema 2020-12's)
const BIN = process.env.FL_BIN;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fogline-schema-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

let files = 0;
function run(schema, args, input) {
  const f = path.join(dir, `s${files++}.json`);
  fs.writeFileSync(f, typeof schema === 'string' ? schema : JSON.stringify(schema));
  return spawnSync(BIN, ['schema', '--schema', f, ...args], { input, encoding: 'utf8', maxBuffer: 64 << 20 });
}

function compile(schema, args = [], input) {
  const r = run(schema, args, input);
  assert.equal(r.status, 0, `fogline schema failed: ${r.stderr}\n${JSON.stringify(schema)}`);
  const lines = r.stdout.split('\n').filter(Boolean);
  return { info: JSON.parse(lines[0]), rest: lines.slice(1) };
}

const samples = (schema, n, seed, maxBytes = 4000) =>
  compile(schema, ['--sample', String(n), '--seed', String(seed), '--max-bytes', String(maxBytes)]).rest.map((l) => JSON.parse(l));

// ---- a seeded generator of schemas in the subset, and of instances of a schema ----

function genInstance(r, s, root = s) {
  if (s.$ref) return genInstance(r, root.$defs[s.$ref.split('/').pop()], root);
  if (s.allOf) return genInstance(r, s.allOf[0], root);
  if ('const' in s) return s.const;
  if (s.enum) return pick(r, s.enum);
  if (s.anyOf || s.oneOf) return genInstance(r, pick(r, s.anyOf || s.oneOf), root);
  const type = Array.isArray(s.type) ? pick(r, s.type) : s.type;
  switch (type) {
    case 'string': return pick(r, ['', 'ok', 'line\nbreak', 'tab\t"quote"\\', 'ünïcødé ✓ 😀', 'x'.repeat(30)]);
    case 'number': return pick(r, [0, -1.5, 3.25e10, 12, 0.001]);
    case 'integer': return pick(r, [0, 7, -42, 123456]);
    case 'boolean': return r() < 0.5;
    case 'null': return null;
    case 'object': {
      const extra = typeof s.additionalProperties === 'object' ? s.additionalProperties : null;
      if ((!s.properties || !Object.keys(s.properties).length) && !extra)
        return s.additionalProperties === false ? {} : { k: [1, 'x', { deep: null }], n: 2 };
      const o = {};
      for (const [k, v] of Object.entries(s.properties || {})) if ((s.required || []).includes(k) || r() < 0.5) o[k] = genInstance(r, v, root);
      // other names after them, of the additionalProperties schema (names that are not
      // integers: JavaScript would put those first)
      if (extra) for (const k of ['x1', 'é', 'a b', 'k"', '']) if (!(k in (s.properties || {})) && r() < 0.4) o[k] = genInstance(r, extra, root);
      return o;
    }
    case 'array': {
      const lo = s.minItems || 0, hi = s.maxItems ?? lo + 3;
      return Array.from({ length: lo + Math.floor(r() * (hi - lo + 1)) }, () => genInstance(r, s.items, root));
    }
    default: throw new Error(`no type ${type}`);
  }
}

// whitespace JSON allows, in odd amounts: around every structural character
const spaced = (text) => text.replace(/("(?:[^"\\]|\\.)*")|([{}[\]:,])/g, (m, str, p) => (str ? str : ` \n\t${p}\r `)).trim();

const ajv = new Ajv({ strict: false });
// the same with OpenAPI's discriminator checked too (the tag required, a string in the mapping)
const ajvDisc = new Ajv({ strict: false, discriminator: true });

const HAND = [
  { type: 'object', properties: { order_id: { type: 'string' }, status: { enum: ['shipped', 'pending', 'lost'] },
    eta_days: { anyOf: [{ type: 'integer' }, { type: 'null' }] } }, required: ['order_id', 'status', 'eta_days'], additionalProperties: false },
  { type: 'object', properties: { name: { const: 'refund' }, arguments: { type: 'object', properties: { order: { type: 'string' },
    amount: { type: 'number' }, items: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 3 } },
    required: ['order', 'amount', 'items'], additionalProperties: false } }, required: ['name', 'arguments'], additionalProperties: false },
  { $defs: { addr: { type: 'object', properties: { city: { type: 'string' }, zip: { type: ['string', 'null'] } }, required: ['city', 'zip'], additionalProperties: false } },
    type: 'object', properties: { from: { $ref: '#/$defs/addr' }, to: { $ref: '#/$defs/addr' } }, required: ['from', 'to'], additionalProperties: false },
  { type: 'object', properties: { a: { type: 'boolean' }, b: { type: 'integer' }, c: { type: 'string' } }, required: ['b'], additionalProperties: false },
  { type: 'array', items: { type: 'array', items: { type: 'number' }, maxItems: 2 }, minItems: 2 },
  { type: 'object', properties: {}, additionalProperties: false },
  { type: 'object' },
  { enum: ['a', 1, null, [1, 2], { k: 'v' }] },
  { type: 'string' },
  true,
  // pydantic's $ref with annotations of its own: allOf of one schema
  // pydantic's Dict[str, int], and a model with a Dict[str, List[str]] field and other names
  // allowed beside its properties
  { type: 'object', additionalProperties: { type: 'integer' } },
  { type: 'object', properties: { name: { type: 'string' }, tags: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' }, maxItems: 2 } } },
    required: ['name', 'tags'], additionalProperties: { type: ['number', 'null'] } },
  { $defs: { Addr: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } },
    type: 'object', properties: { home: { allOf: [{ $ref: '#/$defs/Addr' }], description: 'where they live', default: { city: 'x' } },
      n: { allOf: [{ type: 'integer' }] } }, required: ['home', 'n'], additionalProperties: false },
];

function checkSchema(schema, seed, also = null) {
  const validate = ajv.compile(schema), validate2 = also ? also.compile(schema) : null;
  const r = rng(seed * 7919);
  const good = [], bad = [];
  for (let i = 0; i < 6; i++) {
    const inst = schema === true ? { any: [1, 'x'] } : genInstance(r, schema);
    assert.ok(validate(inst), `the generator made an invalid instance ${JSON.stringify(inst)}`);
    const t = JSON.stringify(inst);
    good.push(t, JSON.stringify(inst, null, 2), spaced(t));
    if (t.length > 1) bad.push(t.slice(0, -1)); // cut short
    if (inst && typeof inst === 'object' && !Array.isArray(inst)) {
      const req = (schema.required || []).filter((k) => k in inst);
      if (req.length) { const o = { ...inst }; delete o[req[0]]; bad.push(JSON.stringify(o)); }
    }
    bad.push(t + ' x', '[' + t, 'nul');
  }
  // one run: 12 samples, then whether each text is accepted
  const N = 12;
  const out = compile(schema, ['--sample', String(N), '--seed', String(seed), '--max-bytes', '4000', '--match'],
                      [...good, ...bad].map((t) => JSON.stringify(t)).join('\n') + '\n').rest;
  assert.equal(out.length, N + good.length + bad.length);
  const okGood = out.slice(N, N + good.length).map((l) => l === 'true');
  const okBad = out.slice(N + good.length).map((l) => l === 'true');
  // sound: what the automaton accepts is valid
  for (const text of out.slice(0, N).map((l) => JSON.parse(l))) {
    let v;
    assert.doesNotThrow(() => { v = JSON.parse(text); }, `a sample does not parse: ${JSON.stringify(text)} of ${JSON.stringify(schema)}`);
    assert.ok(validate(v), `a sample is invalid: ${text}\n${JSON.stringify(validate.errors)}\nschema ${JSON.stringify(schema)}`);
    if (validate2) assert.ok(validate2(v), `a sample is invalid: ${text}\n${JSON.stringify(validate2.errors)}\nschema ${JSON.stringify(schema)}`);
  }
  // complete in the schema's order; broken texts rejected by both
  good.forEach((t, i) => assert.ok(okGood[i], `a valid text is rejected: ${JSON.stringify(t)}\nschema ${JSON.stringify(schema)}`));
  bad.forEach((t, i) => {
    let valid = false;
    try { valid = validate(JSON.parse(t)); } catch { /* not JSON */ }
    if (!valid) assert.ok(!okBad[i], `an invalid text is accepted: ${JSON.stringify(t)}\nschema ${JSON.stringify(schema)}`);
  });
}

test('hand-written schemas: samples valid (ajv), valid texts accepted, broken ones rejected', () => {
  HAND.forEach((s, i) => checkSchema(s, i + 1));
});

test('200 random schemas of the subset: samples valid, instances accepted in any JSON whitespace', () => {
  const r = rng(20261203);
  for (let i = 0; i < 200; i++) checkSchema(genSchema(r, 3), i + 100);
});

test('100 random schemas with oneOfs (told apart by type, or by a tag as a discriminator): samples valid, instances accepted', () => {
  const r = rng(20261207);
  let ones = 0, tagged = 0;
  for (let i = 0; i < 100; i++) {
    const s = genSchema(r, 3, true), text = JSON.stringify(s);
    ones += text.includes('"oneOf"');
    tagged += text.includes('"kind"');
    checkSchema(s, i + 400, ajvDisc);
  }
  assert.ok(ones >= 40 && tagged >= 20, `only ${ones} of the schemas have a oneOf, ${tagged} a tagged one`);
});

// --match on each text (compact JSON), as one run: the verdicts
const matches = (schema, texts) => compile(schema, ['--match'], texts.map((t) => JSON.stringify(t)).join('\n') + '\n').rest.map((l) => l === 'true');

// pydantic v2's model_json_schema() of a discriminated union:
//   class Cat(BaseModel): pet_type: Literal['cat']; meows: int
//   class Dog(BaseModel): pet_type: Literal['dog']; barks: float
//   class Lizard(BaseModel): pet_type: Literal['reptile', 'lizard']; scales: bool
//   class Model(BaseModel): pet: Union[Cat, Dog, Lizard] = Field(discriminator='pet_type'); n: int
const PETS = { $defs: {
  Cat: { properties: { pet_type: { const: 'cat', title: 'Pet Type', type: 'string' }, meows: { title: 'Meows', type: 'integer' } }, required: ['pet_type', 'meows'], title: 'Cat', type: 'object' },
  Dog: { properties: { pet_type: { const: 'dog', title: 'Pet Type', type: 'string' }, barks: { title: 'Barks', type: 'number' } }, required: ['pet_type', 'barks'], title: 'Dog', type: 'object' },
  Lizard: { properties: { pet_type: { enum: ['reptile', 'lizard'], title: 'Pet Type', type: 'string' }, scales: { title: 'Scales', type: 'boolean' } }, required: ['pet_type', 'scales'], title: 'Lizard', type: 'object' } },
  properties: { pet: { discriminator: { mapping: { cat: '#/$defs/Cat', dog: '#/$defs/Dog', lizard: '#/$defs/Lizard', reptile: '#/$defs/Lizard' }, propertyName: 'pet_type' },
    oneOf: [{ $ref: '#/$defs/Cat' }, { $ref: '#/$defs/Dog' }, { $ref: '#/$defs/Lizard' }], title: 'Pet' }, n: { title: 'N', type: 'integer' } },
  required: ['pet', 'n'], title: 'Model', type: 'object' };

test('oneOf: pydantic\'s discriminated union: every sample matches exactly one schema, each is written, verdicts agree with ajv', () => {
  const validate = ajv.compile(PETS);
  const one = PETS.properties.pet.oneOf.map((b) => ajv.compile({ ...b, $defs: PETS.$defs }));
  // ajv's own discriminator check, which refuses a mapping: the same schema without it
  const disc = structuredClone(PETS);
  delete disc.properties.pet.discriminator.mapping;
  const validate2 = ajvDisc.compile(disc);
  const seen = new Set();
  for (const t of samples(PETS, 60, 11)) {
    const v = JSON.parse(t);
    assert.ok(validate(v) && validate2(v), `a sample is invalid: ${t} ${JSON.stringify(validate.errors)}`);
    assert.equal(one.filter((f) => f(v.pet)).length, 1, `a sample's pet matches ${one.filter((f) => f(v.pet)).length} schemas: ${t}`);
    seen.add(v.pet.pet_type);
  }
  assert.deepEqual([...seen].sort(), ['cat', 'dog', 'lizard', 'reptile']);
  const texts = ['{"pet":{"pet_type":"cat","meows":1},"n":1}', '{"pet":{"pet_type":"dog","barks":1.5},"n":2}',
    '{"pet":{"pet_type":"reptile","scales":true},"n":3}', '{"pet":{"pet_type":"dog","meows":1},"n":1}',
    '{"pet":{"pet_type":"cow","meows":1},"n":1}', '{"pet":{"meows":1},"n":1}', '{"pet":{"pet_type":"cat","meows":1.5},"n":1}',
    '{"pet":null,"n":1}', '{"n":1}'];
  assert.deepEqual(matches(PETS, texts), texts.map((t) => validate(JSON.parse(t))));
  assert.deepEqual(texts.map((t) => validate(JSON.parse(t))), [true, true, true, false, false, false, false, false, false]);
});

test('oneOf: a tag that may be left out is always written (a schema\'s objects then carry their own value)', () => {
  // pet_type: Literal['cat'] = 'cat' (a default: not required); additionalProperties absent, so
  // {"meows": 1} alone would be valid for Cat, and {"pet_type": "cat", "barks": 1} for Dog but
  // for the tag
  const s = { oneOf: [
    { type: 'object', properties: { pet_type: { const: 'cat', type: 'string', default: 'cat' }, meows: { type: 'integer' } }, required: ['meows'] },
    { type: 'object', properties: { pet_type: { const: 'dog', type: 'string', default: 'dog' }, barks: { type: 'integer' } }, required: ['barks'] }] };
  const validate = ajv.compile(s);
  const one = s.oneOf.map((b) => ajv.compile(b));
  for (const t of samples(s, 40, 3)) {
    const v = JSON.parse(t);
    assert.ok(validate(v), `a sample is invalid: ${t}`);
    assert.ok('pet_type' in v, `a sample without its tag: ${t}`);
    assert.equal(one.filter((f) => f(v)).length, 1, t);
  }
  // valid ones without the tag are not written (the subset)
  assert.deepEqual(matches(s, ['{"pet_type":"cat","meows":1}', '{"meows":1}', '{"pet_type":"dog","barks":2}', '{"barks":2}', '{}']),
    [true, false, true, false, false]);
  assert.deepEqual(['{"meows":1}', '{"barks":2}', '{}'].map((t) => validate(JSON.parse(t))), [true, true, false]);
});

test('a type beside $ref, anyOf, oneOf, const or enum, and object or array keywords without a type: verdicts agree with ajv', () => {
  const cases = [
    [{ type: ['string', 'null'], anyOf: [{ type: 'string', maxLength: 2 }, { type: 'integer' }, { type: 'null' }, {}] },
      ['"ab"', '"abc"', 'null', '1', 'true', '{}', '[]']],
    // (as text: 2.0 is an integer, written as the schema spells it)
    ['{"type": "integer", "enum": [1, 2.0, 2.5, "x", 3]}', ['1', '2.0', '2.5', '"x"', '3', '4']],
    [{ type: 'string', const: 'a' }, ['"a"', '"b"', '1']],
    [{ $defs: { n: { type: 'number', minimum: 0 } }, type: 'integer', $ref: '#/$defs/n' }, ['1', '1.5', '-1', '0', '"1"']],
    [{ properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false },
      ['{"a":"x"}', '{}', '{"a":1}', '{"a":"x","b":1}', '1', '"s"', 'null', '[1]', 'true']],
    [{ items: { type: 'integer' }, maxItems: 2 }, ['[1,2]', '[1,2,3]', '["a"]', '"a"', '{"k":1}', '[]']],
    // other names than the properties', of the additionalProperties schema; a property's name
    // in another spelling is that property (JSON.parse keeps the last)
    [{ type: 'object', properties: { a: { type: 'string' }, ab: { type: 'boolean' } }, required: ['a'], additionalProperties: { type: 'integer' } },
      ['{"a":"x","b":1}', '{"a":"x","a":1}', '{"a":"x","ab":1}', '{"a":"x","abc":1,"":2}', '{"a":"x","\\u0061":1}',
        '{"a":"x","ab":true,"a b":3,"é":-1}', '{"b":1}', '{"a":"x","b":"s"}', '{"a":"x","b":1,"b":2}']],
    [{ additionalProperties: { type: 'string' } }, ['{"k":"v"}', '{"k":1}', '1', '{}']],
    // uniqueItems of few values (pydantic's Set[Literal[...]], Set[SomeEnum]); equal numbers are one value
    [{ type: 'array', items: { enum: ['r', 'w', 'x'] }, uniqueItems: true },
      ['[]', '["r"]', '["r","w","x"]', '["r","r"]', '["x","r"]', '["r","w","x","r"]', '["y"]']],
    [{ type: 'array', items: { type: 'boolean' }, uniqueItems: true, minItems: 2 }, ['[true,false]', '[false,true]', '[true,true]', '[true]', '[]']],
    [{ $defs: { P: { enum: ['read', 'write'], title: 'P', type: 'string' } }, type: 'object',
      properties: { perms: { items: { $ref: '#/$defs/P' }, type: 'array', uniqueItems: true } }, required: ['perms'] },
      ['{"perms":["write","read"]}', '{"perms":["read","read"]}', '{"perms":[]}']],
    // (ajv refuses an enum that repeats a value: it reads the same set without the repeat)
    ['{"type": "array", "items": {"enum": [1, 1.0, 2]}, "uniqueItems": true}', ['[1,2]', '[1.0,2]', '[1,1.0]', '[2,1,2]'],
      { type: 'array', items: { enum: [1, 2] }, uniqueItems: true }],
    [{ type: 'array', items: { type: 'string' }, uniqueItems: false }, ['["a","a"]', '[1]']],
    // OpenAPI 3.0's nullable, and the annotations pydantic writes for deprecated and computed fields
    [{ type: 'string', nullable: true, maxLength: 2 }, ['"ab"', 'null', '"abc"', '1']],
    [{ type: 'object', properties: { a: { type: 'integer', nullable: true, deprecated: true, readOnly: true }, b: { writeOnly: true, type: 'string' } }, required: ['a'] },
      ['{"a":1}', '{"a":null}', '{"a":"x"}', '{"a":1,"b":"s"}']],
    [{ type: ['string', 'integer', 'boolean'], oneOf: [{ type: 'string' }, { type: 'number' }, { type: 'null' }] },
      ['"s"', '1', '1.5', 'null', 'true']],
  ];
  for (const [schema, texts, same] of cases) {
    const validate = ajv.compile(same || (typeof schema === 'string' ? JSON.parse(schema) : schema));
    assert.deepEqual(matches(schema, texts), texts.map((t) => validate(JSON.parse(t))), JSON.stringify(schema));
    for (const t of samples(schema, 20, 7)) assert.ok(validate(JSON.parse(t)), `a sample is invalid: ${t} of ${JSON.stringify(schema)}`);
  }
});

test('tuples (prefixItems, JSON Schema 2020-12; pydantic\'s Tuple[int, str]): verdicts agree with ajv', () => {
  const ajv20 = new Ajv2020({ strict: false });
  const cases = [
    [{ type: 'array', prefixItems: [{ type: 'integer' }, { type: 'string' }], minItems: 2, maxItems: 2 }, ['[1,"a"]', '[1]', '["a",1]', '[1,"a",2]', '[]']],
    [{ type: 'array', prefixItems: [{ type: 'integer' }, { type: 'boolean' }], items: { type: 'null' } },
      ['[]', '[1]', '[1,true]', '[1,true,null,null]', '[1,true,1]', '[true]']],
    [{ type: 'array', prefixItems: [{ type: 'integer' }], items: false, minItems: 1 }, ['[1]', '[1,2]', '[]']],
    [{ prefixItems: [{ const: 'a' }], maxItems: 3 }, ['["a"]', '["b"]', '"x"', '[]', '["a",3]', '["a",3,{}]', '["a",1,2,3]']],
    [{ type: 'array', items: false }, ['[]', '[1]']],
  ];
  for (const [schema, texts] of cases) {
    const validate = ajv20.compile(schema);
    assert.deepEqual(matches(schema, texts), texts.map((t) => validate(JSON.parse(t))), JSON.stringify(schema));
    for (const t of samples(schema, 20, 9)) assert.ok(validate(JSON.parse(t)), `a sample is invalid: ${t} of ${JSON.stringify(schema)}`);
  }
});

// a value nested n levels below the first: a tree whose first children have children ...
function nest(n, leaf, wrap) { let v = leaf; for (let i = 0; i < n; i++) v = wrap(v); return v; }

test('recursive schemas are unrolled: 4 levels of the recursion, the way out taken below', () => {
  // pydantic: class Node(BaseModel): name: str; children: List['Node']
  const tree = { $defs: { Node: { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, children: { type: 'array', items: { $ref: '#/$defs/Node' } } },
    required: ['name', 'children'] } }, $ref: '#/$defs/Node' };
  // a binary tree, nulls as the way out; a list (an optional next); the root itself ('#')
  const bin = { $defs: { T: { type: 'object', properties: { v: { type: 'integer' }, l: { anyOf: [{ $ref: '#/$defs/T' }, { type: 'null' }] },
    r: { anyOf: [{ $ref: '#/$defs/T' }, { type: 'null' }] } }, required: ['v', 'l', 'r'] } }, $ref: '#/$defs/T' };
  const list = { type: 'object', properties: { x: { type: 'boolean' }, next: { $ref: '#' } }, required: ['x'], additionalProperties: false };
  const depth = (v, key) => (v && typeof v === 'object' ? 1 + Math.max(0, ...(Array.isArray(v[key]) ? v[key] : [v[key]]).map((c) => depth(c, key))) : 0);
  for (const [schema, key, leaf, wrap] of [
    [tree, 'children', { name: 'a', children: [] }, (c) => ({ name: 'p', children: [c, { name: 'b', children: [] }] })],
    [bin, 'l', { v: 1, l: null, r: null }, (c) => ({ v: 2, l: c, r: null })],
    [list, 'next', { x: true }, (c) => ({ x: false, next: c })]]) {
    const validate = ajv.compile(schema);
    let deepest = 0;
    for (const t of samples(schema, 40, 21)) {
      const v = JSON.parse(t);
      assert.ok(validate(v), `a sample is invalid: ${t} ${JSON.stringify(validate.errors)}`);
      deepest = Math.max(deepest, depth(v, key));
    }
    assert.ok(deepest >= 2 && deepest <= 4, `the samples nest ${deepest} levels: ${JSON.stringify(schema)}`);
    // 4 levels are written, 5 are not (a subset of the valid values: ajv takes both)
    const texts = [1, 2, 3, 4, 5].map((n) => JSON.stringify(nest(n - 1, leaf, wrap)));
    for (const t of texts) assert.ok(validate(JSON.parse(t)), t);
    assert.deepEqual(matches(schema, texts), [true, true, true, true, false], JSON.stringify(schema));
  }
});

test('$ref resolves in the nearest enclosing subschema with an $id (a schema resource of its own)', () => {
  // b is a resource with its own $defs.v: b.x is a string, a (the root's v) an integer
  const s = { $defs: { v: { type: 'integer' } }, type: 'object', properties: { a: { $ref: '#/$defs/v' },
    b: { $id: 'inner', $defs: { v: { type: 'string' } }, type: 'object', properties: { x: { $ref: '#/$defs/v' } },
      required: ['x'], additionalProperties: false } }, required: ['a', 'b'], additionalProperties: false };
  const validate = new Ajv({ strict: false }).compile(s);
  for (const t of samples(s, 20, 5)) assert.ok(validate(JSON.parse(t)), `${t}: ${JSON.stringify(validate.errors)}`);
  const texts = ['{"a":1,"b":{"x":"s"}}', '{"a":1,"b":{"x":2}}', '{"a":"s","b":{"x":"s"}}'];
  const out = compile(s, ['--match'], texts.map((t) => JSON.stringify(t)).join('\n') + '\n').rest;
  assert.deepEqual(out, texts.map((t) => String(validate(JSON.parse(t)))));
  assert.deepEqual(out, ['true', 'false', 'false']);
});

test('the shortest valid text: min_bytes, and a budget below it has no sample', () => {
  const s = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
  const { info } = compile(s);
  assert.equal(info.min_bytes, '{"ok":true}'.length);
  const r = run(s, ['--sample', '1', '--max-bytes', String(info.min_bytes - 1)]);
  assert.equal(r.status, 1);
  assert.match(r.stderr.trim(), /^fogline schema: no text of at most 10 bytes is accepted \(the shortest has 11\)$/);
  for (const t of samples(s, 5, 1, info.min_bytes)) assert.equal(t.length, info.min_bytes);
});

test('response_format json_object: samples are JSON objects', () => {
  const r = spawnSync(BIN, ['schema', '--json-object', '--sample', '40', '--seed', '9'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean).slice(1);
  assert.equal(lines.length, 40);
  for (const l of lines) {
    const v = JSON.parse(JSON.parse(l));
    assert.ok(v && typeof v === 'object' && !Array.isArray(v), l);
  }
});

test('schemas outside the subset: one-line errors naming the keyword and where', () => {
  const cases = [
    // (the list of what is supported, whole: a message is cut at its buffer's end)
    [{ type: 'string', pattern: '^a', minProperties: 1 }, /unsupported keyword 'minProperties' \(fogline constrains to .*, multipleOf, nullable\) \(at the schema's root\)$/],
    [{ type: 'string', pattern: '(?=a)' }, /'pattern': unsupported: lookahead at offset 1 \(at the schema's root\)$/],
    [{ type: 'object', properties: { a: { type: 'string', format: 'uri-reference' } }, required: ['a'] }, /'format': 'uri-reference' is an unsupported format .*\(at \/properties\/a\)$/],
    // a recursion with no way out: every node needs a next one
    [{ $defs: { n: { type: 'object', properties: { next: { $ref: '#/$defs/n' } }, required: ['next'] } }, $ref: '#/$defs/n' },
      /the schema's recursion has no value that stops within 4 levels of itself \(and 8 of objects and arrays\): give it a way out/],
    [{ $ref: '#/$defs/missing' }, /'\$ref' '#\/\$defs\/missing' does not name a schema/],
    [{ type: 'text' }, /unknown type 'text'/],
    [{ type: 'object', properties: { a: { type: 'string' } }, required: ['b'] }, /'required' names 'b', which is not in 'properties'/],
    // without properties (any object, or {}), a required key would be dropped: refused as well
    [{ type: 'object', required: ['a'] }, /'required' names 'a', which is not in 'properties' \(at the schema's root\)$/],
    [{ type: 'object', properties: {}, additionalProperties: false, required: ['a'] }, /'required' names 'a', which is not in 'properties'/],
    [{ type: 'object', properties: { o: { type: 'object', required: [1] } } }, /'required' names '\(not a string\)'.*\(at \/properties\/o\)$/],
    [{ type: 'object', additionalProperties: 3 }, /'additionalProperties' must be a schema, false or true/],
    [{ type: 'array', items: { type: 'string' }, minItems: 3, maxItems: 1 }, /'minItems' is above 'maxItems'/],
    [{ type: 'array', maxItems: 1000 }, /'minItems'\/'maxItems' above 64 are not supported/],
    [{ type: 'array', prefixItems: [] }, /'prefixItems' must be a non-empty array of schemas/],
    [{ type: 'array', items: { type: 'string' }, uniqueItems: true }, /'uniqueItems' is supported for items of at most 8 values \(an enum, a const, boolean or null\)/],
    [{ type: 'array', uniqueItems: true }, /'uniqueItems' is supported for items of at most 8 values/],
    [{ type: 'array', items: { enum: [1, 2, 3, 4, 5, 6, 7, 8, 9] }, uniqueItems: true }, /'uniqueItems' is supported for items of at most 8 values/],
    [{ type: 'array', items: { enum: ['a', 'b'] }, uniqueItems: true, minItems: 3 }, /'minItems' is above the distinct values the unique items may have/],
    [{ type: 'array', items: { type: 'string' }, uniqueItems: 'yes' }, /'uniqueItems' must be true or false/],
    [{ nullable: true }, /'nullable' \(OpenAPI 3.0's\) must be true or false, beside a 'type' \(at the schema's root\)$/],
    [{ type: 'string', nullable: 1 }, /'nullable' \(OpenAPI 3.0's\) must be true or false/],
    [{ type: 'array', prefixItems: [{ type: 'integer' }], items: false, minItems: 2 }, /'minItems' is above the items 'prefixItems' and 'items' false allow/],
    [{ type: 'array', items: [{ type: 'string' }] }, /'items' must be one schema \(an object, or true or false\)/],
    [{ type: 'string', prefixItems: [{ type: 'string' }] }, /'prefixItems' needs a 'type' that includes "array"/],
    [{ anyOf: [] }, /'anyOf' must be a non-empty array/],
    [{ enum: 'a' }, /'enum' must be a non-empty array/],
    [{ oneOf: [{ type: 'number' }, { type: 'integer' }] }, /'oneOf' schemas 0 and 1 may both match one value .*discriminator.* \(at the schema's root\)$/],
    [{ type: 'object', properties: { pet: { oneOf: [{ type: 'object', properties: { k: { const: 'a' } }, required: ['k'] }, { type: 'null' },
      { type: 'object', properties: { k: { enum: ['b', 'a'] } }, required: ['k'] }] } } }, /'oneOf' schemas 0 and 2 may both match .*\(at \/properties\/pet\)$/],
    // the discriminator is the tag: when it does not tell two apart, no other property is tried
    [{ oneOf: [{ type: 'object', properties: { k: { const: 'a' }, n: { const: 1 } }, required: ['k', 'n'] },
      { type: 'object', properties: { k: { const: 'b' }, n: { const: 1 } }, required: ['k', 'n'] }], discriminator: { propertyName: 'n' } }, /'oneOf' schemas 0 and 1 may both match/],
    [{ oneOf: [{ type: 'object', properties: { k: { const: 1 } }, required: ['k'] }, { type: 'object', properties: { k: { const: 1.0 } }, required: ['k'] }] }, /'oneOf' schemas 0 and 1 may both match/],
    [{ oneOf: [] }, /'oneOf' must be a non-empty array/],
    [{ oneOf: [{ type: 'string' }], discriminator: 'kind' }, /'discriminator' must be an object with a string 'propertyName'/],
    [{ type: 'object', discriminator: { propertyName: 'k' } }, /'discriminator' needs a 'oneOf' \(or 'anyOf'\) beside it/],
    [{ const: 1, enum: [1] }, /'enum' beside 'const' is not supported/],
    [{ $defs: { a: { type: 'string' } }, $ref: '#/$defs/a', anyOf: [{ type: 'string' }] }, /'anyOf' beside '\$ref' is not supported/],
    [{ properties: { a: {} }, anyOf: [{ type: 'object' }] }, /'properties' beside \$ref, const, enum, anyOf or oneOf is not supported/],
    [{ type: 'string', properties: { a: {} } }, /'properties' needs a 'type' that includes "object"/],
    [{ type: 'object', items: { type: 'string' } }, /'items' needs a 'type' that includes "array"/],
    [{ type: 'integer', const: 'a' }, /no value of 'const' is of the schema's 'type'/],
    [{ type: 'object', enum: [1, 'a'] }, /no value of 'enum' is of the schema's 'type'/],
    [{ type: 'object', anyOf: [{ type: 'string' }, { type: 'null' }] }, /no schema of 'anyOf' has values of the 'type' beside it/],
    [{ $defs: { n: { type: 'integer' } }, type: 'string', $ref: '#/$defs/n' }, /no value is of this 'type' and of the 'type' beside .*\(at \/\$defs\/n\)$/],
    [{ allOf: [{ type: 'string' }, { type: 'string' }] }, /'allOf' is supported with exactly one schema/],
    [{ allOf: [] }, /'allOf' is supported with exactly one schema/],
    [{ type: 'object', properties: { a: { allOf: [{ type: 'string' }], type: 'string' } } }, /'type' beside 'allOf' is not supported .*\(at \/properties\/a\)$/],
    [{ allOf: [{ type: 'strin' }] }, /unknown type 'strin' .*\(at \/allOf\/0\)$/],
    [[1, 2], /a schema must be an object \(or true\)/],
    ['{"type": ', /line 1: /],
  ];
  let deep = { type: 'string' };
  for (let i = 0; i < 9; i++) deep = { type: 'array', items: deep };
  cases.push([deep, /nests objects and arrays deeper than the allowed levels/]);
  // 300 tagged schemas of 300 values each: 45,000 pairs of 90,000 comparisons, bounded
  cases.push([{ oneOf: Array.from({ length: 300 }, (_, i) => ({ type: 'object', properties: { k: { enum: Array.from({ length: 300 }, (_, j) => `v${i}_${j}`) } }, required: ['k'] })) },
    /'oneOf' has too many schemas or values to prove them exclusive \(more than 4000000 comparisons\)/]);
  for (const [schema, re] of cases) {
    const r = run(schema, []);
    assert.equal(r.status, 1, `${JSON.stringify(schema)}: ${r.stderr}`);
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, r.stderr);
    assert.match(lines[0], /^fogline schema: /);
    assert.match(lines[0], re);
    assert.equal(r.stdout, '');
  }
  // client text quoted in a message (a key, a path) is cut on a character boundary: the line
  // is valid UTF-8
  for (const [schema, re] of [[{ type: 'object', ['a' + 'é'.repeat(40)]: 1 }, new RegExp(`unsupported keyword '${'a' + 'é'.repeat(31)}' \\(`)],
    [{ type: 'object', properties: { ['é'.repeat(150)]: { format: 'x' } } }, /\(at \/properties\/(é)+\)$/],
    [{ type: 'object', properties: { ['é'.repeat(300)]: { type: 'object', properties: { a: { type: 'text' } } } } }, /unknown type 'text'.*\(at \/properties\/(é)+\/?\)$/]]) {
    const f = path.join(dir, `s${files++}.json`);
    fs.writeFileSync(f, JSON.stringify(schema));
    const r = spawnSync(BIN, ['schema', '--schema', f]);
    assert.equal(r.status, 1);
    let line;
    assert.doesNotThrow(() => { line = new TextDecoder('utf-8', { fatal: true }).decode(r.stderr).trim(); }, 'the message is not UTF-8');
    assert.match(line, re);
  }
  // bad flags
  for (const [args, re] of [[['--json-object', '--sample', 'x'], /--sample needs an integer/], [[], /give one of --schema FILE, --json-object, --regex/],
                            [['--json-object', '--max-bytes', '0'], /--max-bytes needs an integer in \[1,/]]) {
    const r = spawnSync(BIN, ['schema', ...args], { encoding: 'utf8' });
    assert.equal(r.status, 2);
    assert.match(r.stderr.trim(), re);
  }
});
