// What the body pipeline refuses in a parsed JSON body before any schema or service sees it
// (plain JS: the Piscina worker that parses large bodies imports it too). JSON.parse accepts two
// things no service can take: numbers past the double range, which it turns into Infinity
// (`"seed": 1e400` then passes `type: number`), and lone UTF-16 surrogates written as escapes
// (`"\ud800"`), which break encodeURIComponent, UTF-8 encoders and the store's keys. It also bounds
// nesting: a body thousands of levels deep passes JSON.parse and the schema, then overflows the
// stack of the store's record encoder (msgpackr) after the model has run.

/** How deep a request body may nest objects and arrays (the top-level value is level 1). */
export const MAX_JSON_DEPTH = 64;

/**
 * The first such value of `value` (depth-first, arrays in order), or the first object or array
 * deeper than `maxDepth`, as a validation issue naming its JSON pointer: `{path: '/seed', message,
 * keyword}`; null when there is none. Iterative, so a deeply nested body that JSON.parse accepted
 * cannot overflow the stack here.
 * @param {unknown} value
 * @param {number} [maxDepth]
 * @returns {{ path: string, message: string, keyword: string } | null}
 */
export function badJsonValue(value, maxDepth = MAX_JSON_DEPTH) {
  // each entry: [value, parent entry index, key, depth]; the path is rebuilt from the parents on a find
  const stack = [[value, -1, '', 1]];
  const seen = [];
  while (stack.length) {
    const entry = stack.pop();
    const v = entry[0];
    const at = seen.push(entry) - 1;
    let message = null;
    let keyword = null;
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) { message = 'must be a finite number (it overflows a double)'; keyword = 'finite'; }
    } else if (typeof v === 'string') {
      if (!v.isWellFormed()) { message = 'must not contain a lone UTF-16 surrogate'; keyword = 'unicode'; }
    } else if (v !== null && typeof v === 'object' && entry[3] > maxDepth) {
      message = `must not nest deeper than ${maxDepth} levels`;
      keyword = 'maxDepth';
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) {
        const x = v[i];
        if (typeof x === 'object' || typeof x === 'number' || typeof x === 'string') {
          stack.push([x, at, String(i), entry[3] + 1]);
        }
      }
    } else if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v);
      for (let i = keys.length - 1; i >= 0; i--) {
        const k = keys[i];
        if (!k.isWellFormed()) {
          const message = 'property names must not contain a lone UTF-16 surrogate';
          return { path: `${pathOf(seen, at)}/${pointer(k)}`, message, keyword: 'unicode' };
        }
        stack.push([v[k], at, k, entry[3] + 1]);
      }
    }
    if (message) return { path: pathOf(seen, at), message, keyword };
  }
  return null;
}

const pointer = (k) => k.replace(/~/g, '~0').replace(/\//g, '~1');

function pathOf(seen, at) {
  let path = '';
  for (let i = at; i > 0; i = seen[i][1]) path = '/' + pointer(seen[i][2]) + path;
  return path;
}
