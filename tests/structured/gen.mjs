// A seeded generator of JSON schemas in the subset fogline constrains to (OpenAI's strict
// subset, docs/structured.md), shared by the compiler's tests and the decoding tests.
export function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 2 ** 32; };
}
export const pick = (r, a) => a[Math.floor(r() * a.length)];
export const WORDS = ['order_id', 'status', 'qty', 'sku', 'name', 'email', 'refund', 'note', 'items', 'é_ключ', 'a b', 'quote"d', 'x'];

// oneOf: also oneOfs of schemas that differ in type, or in a tag property's const or enum (a
// discriminator, as pydantic writes one), at any depth, and objects whose other names have a
// schema of their own (additionalProperties)
export function genSchema(r, depth, oneOf = false) {
  const kinds = ['string', 'number', 'integer', 'boolean', 'null', 'enum', 'const', 'anyOf', 'types'];
  if (depth > 0) kinds.push('object', 'object', 'array', 'array');
  if (oneOf) kinds.push(...Array(8).fill('oneOf'));
  const sub = (d) => genSchema(r, d, oneOf);
  switch (pick(r, kinds)) {
    case 'oneOf': {
      if (depth <= 0 || r() < 0.4) { // by type: two or three of these, each at most once
        const types = [{ type: 'string' }, { type: pick(r, ['integer', 'number']) }, { type: 'boolean' }, { type: 'null' }, { enum: ['a', 'b'] }];
        const k = 2 + Math.floor(r() * 2), out = [];
        for (const t of types) if (out.length < k && r() < 0.6 && !(t.enum && out.some((o) => o.type === 'string'))) out.push(t);
        return { oneOf: out.length >= 2 ? out : [{ type: 'string' }, { type: 'null' }] };
      }
      const n = 2 + Math.floor(r() * 2), tags = ['cat', 'dog', 'fish', 'bird', 'ant', 'eel'];
      const branches = Array.from({ length: n }, (_, i) => {
        const tag = r() < 0.7 ? { const: tags[2 * i], type: 'string' } : { enum: [tags[2 * i], tags[2 * i + 1]], type: 'string' };
        const props = { kind: tag };
        for (let j = 0; j < 1 + Math.floor(r() * 2); j++) props[pick(r, WORDS)] = sub(depth - 1);
        return { type: 'object', properties: props, required: Object.keys(props), ...(r() < 0.5 ? { additionalProperties: false } : {}) };
      });
      return { oneOf: branches, ...(r() < 0.5 ? { discriminator: { propertyName: 'kind' } } : {}) };
    }
    case 'enum': return { enum: [...new Set(Array.from({ length: 1 + Math.floor(r() * 4) }, () => pick(r, ['a', 'b', 'shipped', 1, 2.5, true, null, 'ünï'])))] };
    case 'const': return { const: pick(r, ['refund', 42, false, null, 'x"y']) };
    case 'anyOf': return { anyOf: [sub(depth - 1 < 0 ? 0 : depth - 1), sub(0)] };
    case 'types': return { type: ['string', 'null'] };
    case 'object': {
      const n = 1 + Math.floor(r() * 4);
      const props = {};
      for (let i = 0; i < n; i++) props[pick(r, WORDS)] = sub(depth - 1);
      const keys = Object.keys(props);
      const required = r() < 0.7 ? keys : keys.filter(() => r() < 0.5);
      // (with oneOf: also other names, of a schema of their own)
      return { type: 'object', properties: props, required, additionalProperties: oneOf && r() < 0.3 ? sub(depth - 1) : false };
    }
    case 'array': {
      const s = { type: 'array', items: sub(depth - 1) };
      if (r() < 0.4) s.minItems = Math.floor(r() * 3);
      if (r() < 0.4) s.maxItems = (s.minItems || 0) + Math.floor(r() * 3);
      return s;
    }
    default: return { type: pick(r, ['string', 'number', 'integer', 'boolean', 'null']) };
  }
}

