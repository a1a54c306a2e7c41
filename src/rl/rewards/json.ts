// JSON rewards. The completion's JSON is found by `extractJson`: the body of the last ```json (or
// bare ```) code fence if there is one, else the whole trimmed completion, else the span from its
// first `{`/`[` to its last `}`/`]`. The answer must be JSON (an error otherwise).
//
//   json_match        1 when the completion's JSON equals the answer's: objects compare by key
//                     regardless of key order, arrays element by element in order, numbers by value
//                     (1 equals 1.0); 0 when they differ or no JSON is found.
//   json_loose_match  partial credit over leaves: both values are flattened to their leaves (JSON
//                     pointer path → scalar; an empty object or array is a leaf); the reward is
//                     (leaves present in both with equal values) / (distinct paths in either), so a
//                     missing key, a wrong value and an extra key each cost the same share.
//                     1 exactly when the two are equal; 0 when no JSON is found.

const FENCE = /```[ \t]*(?:json[c5]?|javascript|js)?[ \t]*\r?\n?([\s\S]*?)```/gi;

function tryParse(s: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(s) };
  } catch {
    return { ok: false };
  }
}

/** The JSON value a completion holds, or undefined when none parses. */
export function extractJson(completion: string): unknown {
  let fenced: string | null = null;
  FENCE.lastIndex = 0;
  for (let m; (m = FENCE.exec(completion)) !== null; ) fenced = m[1];
  const text = (fenced ?? completion).trim();
  const whole = tryParse(text);
  if (whole.ok) return whole.value;
  const open = text.search(/[{[]/);
  const close = Math.max(text.lastIndexOf('}'), text.lastIndexOf(']'));
  if (open >= 0 && close > open) {
    const inner = tryParse(text.slice(open, close + 1));
    if (inner.ok) return inner.value;
  }
  return undefined;
}

function parseAnswer(answer: string, type: string): unknown {
  const a = tryParse(answer.trim());
  if (!a.ok) throw new Error(`${type}: the answer is not valid JSON`);
  return a.value;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (isObj(a)) {
    if (!isObj(b)) return false;
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return false;
}

/** leaves of a JSON value: JSON pointer → scalar (an empty object/array is itself a leaf) */
export function jsonLeaves(v: unknown, path = '', out = new Map<string, unknown>()): Map<string, unknown> {
  const esc = (k: string) => k.replace(/~/g, '~0').replace(/\//g, '~1');
  if (Array.isArray(v) && v.length) v.forEach((x, i) => jsonLeaves(x, `${path}/${i}`, out));
  else if (isObj(v) && Object.keys(v).length) for (const [k, x] of Object.entries(v)) jsonLeaves(x, `${path}/${esc(k)}`, out);
  else out.set(path, v);
  return out;
}

export function jsonMatch(completion: string, answer: string): number {
  const want = parseAnswer(answer, 'json_match');
  const got = extractJson(completion);
  return got !== undefined && jsonEqual(got, want) ? 1 : 0;
}

export function jsonLooseMatch(completion: string, answer: string): number {
  const want = jsonLeaves(parseAnswer(answer, 'json_loose_match'));
  const parsed = extractJson(completion);
  if (parsed === undefined) return 0;
  const got = jsonLeaves(parsed);
  let same = 0;
  for (const [p, v] of want) if (got.has(p) && jsonEqual(got.get(p), v)) same++;
  const union = want.size + [...got.keys()].filter((p) => !want.has(p)).length;
  return union === 0 ? 1 : same / union;
}
