// A small JSON-schema validator for the features the grammar compiler
// supports (tests only): returns a list of errors, empty when valid.
export function validate(schema, value, root = schema, path = '$') {
  const errs = [];
  const fail = (m) => errs.push(`${path}: ${m}`);
  if (schema === true || schema === undefined) return errs;
  if (schema === false) return [`${path}: schema false`];
  if (schema.$ref) {
    const parts = schema.$ref.replace(/^#\/?/, '').split('/').filter(Boolean)
      .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    let target = root;
    for (const p of parts) target = target[p];
    return validate(target, value, root, path);
  }
  if ('const' in schema) {
    if (JSON.stringify(schema.const) !== JSON.stringify(value)) fail(`not const ${JSON.stringify(schema.const)}`);
    return errs;
  }
  if (schema.enum) {
    if (!schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) fail(`not in enum: ${JSON.stringify(value)}`);
    return errs;
  }
  const alts = schema.anyOf || schema.oneOf;
  if (alts) {
    if (!alts.some((a) => validate(a, value, root, path).length === 0)) fail('matches no anyOf/oneOf member');
    return errs;
  }
  const types = schema.type === undefined ? null : [].concat(schema.type);
  const typeOf = (v) => v === null ? 'null' : Array.isArray(v) ? 'array'
    : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;
  if (types) {
    const t = typeOf(value);
    if (!types.includes(t) && !(t === 'integer' && types.includes('number'))) { fail(`type ${t}, want ${types}`); return errs; }
  }
  if (typeof value === 'string') {
    const n = [...value].length;
    if (schema.minLength !== undefined && n < schema.minLength) fail('too short');
    if (schema.maxLength !== undefined && n > schema.maxLength) fail('too long');
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value)) fail(`does not match ${schema.pattern}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) fail('below minimum');
    if (schema.maximum !== undefined && value > schema.maximum) fail('above maximum');
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) fail('not above exclusiveMinimum');
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) fail('not below exclusiveMaximum');
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail('too few items');
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail('too many items');
    value.forEach((v, i) => errs.push(...validate(schema.items, v, root, `${path}[${i}]`)));
  }
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    const props = schema.properties || {};
    for (const r of schema.required || []) if (!(r in value)) fail(`missing ${r}`);
    for (const [k, v] of Object.entries(value)) {
      if (k in props) errs.push(...validate(props[k], v, root, `${path}.${k}`));
      else if (schema.additionalProperties === false) fail(`extra property ${k}`);
      else if (typeof schema.additionalProperties === 'object') errs.push(...validate(schema.additionalProperties, v, root, `${path}.${k}`));
    }
  }
  return errs;
}
