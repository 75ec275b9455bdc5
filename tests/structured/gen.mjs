// A seeded generator of JSON schemas in the subset fogline constrains to (OpenAI's strict
// subset, docs/structured.md), shared by the compiler's tests and the decoding tests.
export function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 2 ** 32; };
}
export const pick = (r, a) => a[Math.floor(r() * a.length)];
export const WORDS = ['order_id', 'status', 'qty', 'sku', 'name', 'email', 'refund', 'note', 'items', 'é_ключ', 'a b', 'quote"d', 'x'];

export function genSchema(r, depth) {
  const kinds = ['string', 'number', 'integer', 'boolean', 'null', 'enum', 'const', 'anyOf', 'types'];
  if (depth > 0) kinds.push('object', 'object', 'array', 'array');
  switch (pick(r, kinds)) {
    case 'enum': return { enum: [...new Set(Array.from({ length: 1 + Math.floor(r() * 4) }, () => pick(r, ['a', 'b', 'shipped', 1, 2.5, true, null, 'ünï'])))] };
    case 'const': return { const: pick(r, ['refund', 42, false, null, 'x"y']) };
    case 'anyOf': return { anyOf: [genSchema(r, depth - 1 < 0 ? 0 : depth - 1), genSchema(r, 0)] };
    case 'types': return { type: ['string', 'null'] };
    case 'object': {
      const n = 1 + Math.floor(r() * 4);
      const props = {};
      for (let i = 0; i < n; i++) props[pick(r, WORDS)] = genSchema(r, depth - 1);
      const keys = Object.keys(props);
      const required = r() < 0.7 ? keys : keys.filter(() => r() < 0.5);
      return { type: 'object', properties: props, required, additionalProperties: false };
    }
    case 'array': {
      const s = { type: 'array', items: genSchema(r, depth - 1) };
      if (r() < 0.4) s.minItems = Math.floor(r() * 3);
      if (r() < 0.4) s.maxItems = (s.minItems || 0) + Math.floor(r() * 3);
      return s;
    }
    default: return { type: pick(r, ['string', 'number', 'integer', 'boolean', 'null']) };
  }
}

