// Constrained decoding from a JSON Schema: the output always parses and validates.
//
// A byte-level pushdown matcher (nondeterministic: a state is a set of "threads", each an immutable frame
// stack) is compiled from the schema once; the vocabulary is put in a byte trie (from Tokenizer.tokenBytes)
// once per tokenizer. allowed() walks the trie depth-first, advancing the matcher byte by byte and pruning
// dead branches, and caches the resulting bitset per matcher state (a state's key is its serialized
// threads), so repeated states (inside free strings, after commas, ...) cost a Map lookup.
//
// Supported: type object (properties in declaration order; required; optional ones may be skipped;
// additionalProperties: only declared properties are produced — a free-form object is used when no
// properties are declared), array (items, minItems, maxItems), string (enum, minLength, maxLength, const),
// number, integer, boolean, null, enum / const of any JSON values, anyOf / oneOf, type arrays
// (["string","null"]), $ref to #/$defs or #/definitions (recursion allowed), {} / true (any JSON value).
// Unsupported keywords that would change validity (pattern, format, minimum/maximum, allOf, not, ...) are
// rejected with an error naming them. Numbers: at most 16 integer digits, 16 fraction digits, 3 exponent
// digits (so every value ends). Whitespace: up to 8 consecutive whitespace bytes where JSON allows it;
// nothing after the top-level value (so EOS is the only continuation).

export interface ConstraintTokenizer {
  readonly vocabSize: number;
  readonly eosIds: number[];
  readonly specialIds: Set<number>;
  tokenBytes(id: number): Uint8Array;
}

export class JsonSchemaError extends Error {
  override name = 'JsonSchemaError';
}

/**
 * The tokenizer's vocabulary cannot spell any JSON value the schema admits (e.g. no token holds '{' and
 * there is no byte fallback): raised up front by compileJsonSchema instead of failing mid-generation.
 */
export class ConstraintUnsatisfiableError extends JsonSchemaError {
  override name = 'ConstraintUnsatisfiableError';
  readonly code = 'response_format_unsatisfiable';
}

type Node =
  | { k: 'obj'; props: { name: string; key: number[]; node: Node; required: boolean }[] }
  | { k: 'freeobj' }
  | { k: 'arr'; items: Node; min: number; max: number }
  | { k: 'str'; min: number; max: number }
  | { k: 'num'; int: boolean }
  | { k: 'lit'; values: number[][] } // JSON texts as bytes
  | { k: 'any' }
  | { k: 'union'; alts: Node[] }
  | { k: 'ref'; target: () => Node };

const enc = new TextEncoder();
const bytesOf = (s: string): number[] => Array.from(enc.encode(s));

const IGNORED = new Set(['title', 'description', '$schema', '$id', 'examples', 'default', '$comment', 'additionalProperties', 'deprecated', 'readOnly', 'writeOnly', '$defs', 'definitions', 'strict']);

function compileSchema(root: unknown): Node {
  const memo = new Map<unknown, Node>();
  const resolveRef = (ref: string): unknown => {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
    const defs = m && (root as Record<string, Record<string, unknown>>)[m[1]];
    if (!m || !defs || !(m[2] in defs)) throw new JsonSchemaError(`$ref "${ref}" cannot be resolved (only #/$defs/… and #/definitions/…)`);
    return defs[m[2]];
  };
  const compile = (s: unknown, path: string): Node => {
    if (s === true || (s && typeof s === 'object' && Object.keys(s).filter((k) => !IGNORED.has(k)).length === 0)) return { k: 'any' };
    if (s === false) throw new JsonSchemaError(`${path}: schema false admits no value`);
    if (!s || typeof s !== 'object' || Array.isArray(s)) throw new JsonSchemaError(`${path}: a schema must be an object`);
    const memoHit = memo.get(s);
    if (memoHit) return memoHit;
    const o = s as Record<string, unknown>;
    if (typeof o.$ref === 'string') {
      const target = resolveRef(o.$ref);
      let cached: Node | undefined;
      const node: Node = { k: 'ref', target: () => (cached ??= compile(target, o.$ref as string)) };
      memo.set(s, node);
      return node;
    }
    for (const key of Object.keys(o)) {
      if (IGNORED.has(key)) continue;
      if (!['type', 'properties', 'required', 'items', 'minItems', 'maxItems', 'enum', 'const', 'anyOf', 'oneOf', 'minLength', 'maxLength', 'nullable'].includes(key))
        throw new JsonSchemaError(`${path}: keyword "${key}" is not supported by constrained decoding`);
    }
    if ('const' in o) return { k: 'lit', values: [bytesOf(JSON.stringify(o.const))] };
    if (Array.isArray(o.enum)) {
      if (o.enum.length === 0) throw new JsonSchemaError(`${path}: enum is empty`);
      return { k: 'lit', values: o.enum.map((v) => bytesOf(JSON.stringify(v))) };
    }
    const alts = (o.anyOf ?? o.oneOf) as unknown[] | undefined;
    if (alts) {
      if (!Array.isArray(alts) || alts.length === 0) throw new JsonSchemaError(`${path}: anyOf/oneOf must be a non-empty array`);
      return { k: 'union', alts: alts.map((a, i) => compile(a, `${path}/anyOf/${i}`)) };
    }
    let type = o.type as string | string[] | undefined;
    if (Array.isArray(type)) {
      const rest = { ...o };
      delete rest.type;
      return { k: 'union', alts: type.map((t) => compile({ ...rest, type: t }, path)) };
    }
    if (o.nullable === true && type) {
      const rest = { ...o };
      delete rest.nullable;
      return { k: 'union', alts: [compile(rest, path), { k: 'lit', values: [bytesOf('null')] }] };
    }
    if (!type) {
      if (o.properties) type = 'object';
      else if (o.items) type = 'array';
      else return { k: 'any' };
    }
    switch (type) {
      case 'object': {
        const props = (o.properties ?? {}) as Record<string, unknown>;
        const required = new Set((o.required as string[]) ?? []);
        for (const r of required) if (!(r in props)) throw new JsonSchemaError(`${path}: required property "${r}" is not declared in properties`);
        const names = Object.keys(props);
        if (names.length === 0) return { k: 'freeobj' };
        const node: Node = { k: 'obj', props: [] };
        memo.set(s, node);
        for (const name of names)
          node.props.push({ name, key: bytesOf(JSON.stringify(name)), node: compile(props[name], `${path}/properties/${name}`), required: required.has(name) });
        return node;
      }
      case 'array': {
        const min = (o.minItems as number) ?? 0, max = (o.maxItems as number) ?? Infinity;
        if (min > max) throw new JsonSchemaError(`${path}: minItems > maxItems`);
        return { k: 'arr', items: o.items === undefined ? { k: 'any' } : compile(o.items, `${path}/items`), min, max };
      }
      case 'string': {
        const min = (o.minLength as number) ?? 0, max = (o.maxLength as number) ?? Infinity;
        if (min > max) throw new JsonSchemaError(`${path}: minLength > maxLength`);
        return { k: 'str', min, max };
      }
      case 'number': return { k: 'num', int: false };
      case 'integer': return { k: 'num', int: true };
      case 'boolean': return { k: 'lit', values: [bytesOf('true'), bytesOf('false')] };
      case 'null': return { k: 'lit', values: [bytesOf('null')] };
      default: throw new JsonSchemaError(`${path}: type "${String(type)}" is not supported`);
    }
  };
  return compile(root, '#');
}

// ---- matcher frames (immutable) ------------------------------------------------------------------------
// V: expecting a value of node (ws allowed before). O: inside an object. A: inside an array. S: inside a
// string. N: inside a number. L: matching literals. K: matching a fixed object key.
type Frame =
  | { t: 'V'; node: Node }
  | { t: 'O'; node: Node & { k: 'obj' }; i: number; st: 0 | 1 | 2 } // st 0: after '{' or ',', expect key; 1: after key, expect ':'; 2: after value, expect ',' or '}'; i: index of the last key emitted (-1 none)
  | { t: 'F'; st: 0 | 1 | 2 | 3 } // free object: 0 after '{' (key or '}'), 3 after ',' (key), 1 after key (':'), 2 after value
  | { t: 'A'; node: Node & { k: 'arr' }; n: number; st: 0 | 1 } // 0: after '[' or ',' (value or ']' when allowed), 1: after value
  | { t: 'S'; min: number; max: number; len: number; esc: number; u: number } // esc: 0 none, 1 after '\', 2..5 hex digits of \u remaining (5 → 4 left); u: UTF-8 continuation bytes still expected
  | { t: 'N'; int: boolean; st: number; d: number } // d: digits in the current part (int / fraction / exponent)
  | { t: 'L'; values: number[][]; pos: number }
  | { t: 'K'; keys: { key: number[]; idx: number }[]; pos: number };

interface Thread {
  f: Frame;
  up: Thread | null;
  ws: number; // consecutive whitespace bytes just consumed
  key?: string;
}

const WS = (b: number): boolean => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const MAX_WS = 8;
const MAX_INT_DIGITS = 16; // beyond 2^53 integers are not exact in JSON parsers anyway
const MAX_FRAC_DIGITS = 16;
const MAX_EXP_DIGITS = 3;
const DIGIT = (b: number): boolean => b >= 0x30 && b <= 0x39;
const HEX = (b: number): boolean => DIGIT(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

const frameIds = new WeakMap<object, number>();
let nextFrameId = 1;
const oid = (o: object): number => {
  let v = frameIds.get(o);
  if (!v) frameIds.set(o, (v = nextFrameId++));
  return v;
};

function threadKey(th: Thread | null): string {
  if (!th) return '$';
  if (th.key !== undefined) return th.key;
  const f = th.f;
  let k: string;
  switch (f.t) {
    case 'V': k = `V${oid(f.node)}`; break;
    case 'O': k = `O${oid(f.node)},${f.i},${f.st}`; break;
    case 'F': k = `F${f.st}`; break;
    case 'A': k = `A${oid(f.node)},${Math.min(f.n, Math.max(f.node.min, f.node.max === Infinity ? 0 : f.node.max))},${f.st}`; break;
    case 'S': k = `S${f.min},${f.max === Infinity ? 'i' : f.max},${f.max === Infinity && f.min === 0 ? 0 : f.len},${f.esc},${f.u}`; break;
    case 'N': k = `N${f.int ? 1 : 0}${f.st},${f.d}`; break;
    case 'L': k = `L${f.pos}:${f.values.map((v) => String.fromCharCode(...v)).join('\u0001')}`; break;
    case 'K': k = `K${f.keys.map((x) => x.idx).join('.')},${f.pos}`; break;
  }
  th.key = `${k}|${th.ws}|${threadKey(th.up)}`;
  return th.key;
}

const DONE: Thread = { f: { t: 'L', values: [], pos: 0 }, up: null, ws: 0, key: '$done' };

/** Advance one thread by byte b; pushes the resulting threads into out. */
function step(th: Thread, b: number, out: Thread[]): void {
  const f = th.f, up = th.up;
  const wsOk = th.ws < MAX_WS;
  const pop = (): void => {
    // the frame finished before b: b goes to the parent
    if (up) step({ ...up, ws: 0, key: undefined }, b, out);
  };
  const popDone = (): Thread => (up ? { ...up, ws: 0, key: undefined } : DONE);
  const push = (frame: Frame, parent: Thread | null, ws = 0): void => { out.push({ f: frame, up: parent, ws }); };
  switch (f.t) {
    case 'V': {
      if (WS(b)) { if (wsOk) push(f, up, th.ws + 1); return; }
      startValue(f.node, up, b, out);
      return;
    }
    case 'S': {
      if (f.esc === 1) {
        if (b === 0x75) { push({ ...f, esc: 5 }, up); return; }
        if ('"\\/bfnrt'.includes(String.fromCharCode(b))) push({ ...f, esc: 0 }, up);
        return;
      }
      if (f.esc >= 2) {
        if (HEX(b)) push({ ...f, esc: f.esc === 2 ? 0 : f.esc - 1 }, up);
        return;
      }
      const isCont = b >= 0x80 && b < 0xc0;
      if (f.u > 0) {
        // inside a multi-byte UTF-8 character: only continuation bytes
        if (isCont) push({ ...f, u: f.u - 1 }, up);
        return;
      }
      if (b === 0x22) { if (f.len >= f.min) out.push(popDone()); return; }
      if (b < 0x20 || isCont || b === 0xc0 || b === 0xc1 || b > 0xf4) return; // control, stray continuation, invalid lead
      if (f.len >= f.max) return;
      if (b === 0x5c) { push({ ...f, esc: 1, len: f.len + 1 }, up); return; }
      const u = b < 0x80 ? 0 : b < 0xe0 ? 1 : b < 0xf0 ? 2 : 3;
      if (u === 0 && f.max === Infinity && f.min === 0) { out.push(th); return; } // same state
      push({ ...f, len: f.len + 1, u }, up);
      return;
    }
    case 'N': {
      // states: 0 start, 1 after '-', 2 after '0', 3 int digits, 4 after '.', 5 frac digits, 6 after e, 7 after e sign, 8 exp digits
      // digits per part are capped (MAX_INT_DIGITS, MAX_FRAC_DIGITS, MAX_EXP_DIGITS) so a number always ends:
      // a model stuck repeating a digit cannot run the output to max_tokens inside one number
      const s = f.st;
      const to = (st: number): void => push({ ...f, st, d: st === s ? f.d + 1 : 1 }, up);
      const more = (cap: number): boolean => f.d < cap;
      const complete = s === 2 || s === 3 || s === 5 || s === 8;
      if (s === 0 && b === 0x2d) to(1);
      else if ((s === 0 || s === 1) && b === 0x30) to(2);
      else if ((s === 0 || s === 1) && b >= 0x31 && b <= 0x39) to(3);
      else if (s === 3 && DIGIT(b) && more(MAX_INT_DIGITS)) to(3);
      else if ((s === 2 || s === 3) && b === 0x2e && !f.int) to(4);
      else if ((s === 4 || (s === 5 && more(MAX_FRAC_DIGITS))) && DIGIT(b)) to(5);
      else if ((s === 2 || s === 3 || s === 5) && (b === 0x65 || b === 0x45) && !f.int) to(6);
      else if (s === 6 && (b === 0x2b || b === 0x2d)) to(7);
      else if ((s === 6 || s === 7 || (s === 8 && more(MAX_EXP_DIGITS))) && DIGIT(b)) to(8);
      if (complete) pop();
      return;
    }
    case 'L': {
      const vals = f.values.filter((v) => v.length > f.pos && v[f.pos] === b);
      if (vals.length) push({ t: 'L', values: vals.length === f.values.length ? f.values : vals, pos: f.pos + 1 }, up);
      // a literal that is complete before b (numbers like 1 vs 12 in an enum)
      if (f.values.some((v) => v.length === f.pos)) pop();
      return;
    }
    case 'K': {
      const keys = f.keys.filter((x) => x.key[f.pos] === b);
      if (!keys.length) return;
      const full = keys.filter((x) => x.key.length === f.pos + 1);
      if (full.length) {
        // key complete: the object frame (up) records which property, expects ':'
        const o = up!.f as Frame & { t: 'O' };
        for (const x of full) push({ ...o, i: x.idx, st: 1 }, up!.up);
      }
      const more = keys.filter((x) => x.key.length > f.pos + 1);
      if (more.length) push({ t: 'K', keys: more, pos: f.pos + 1 }, up);
      return;
    }
    case 'O': {
      if (WS(b)) { if (wsOk) push(f, up, th.ws + 1); return; }
      const props = f.node.props;
      if (f.st === 0 || f.st === 2) {
        // which properties may come next: j > i, with no required property skipped in between
        const canClose = (): boolean => props.slice(f.i + 1).every((p) => !p.required);
        if (b === 0x7d && (f.st === 2 || f.i === -1) && canClose()) { out.push(popDone()); return; }
        if (f.st === 2 && b === 0x2c) {
          if (f.i + 1 < props.length) push({ ...f, st: 0 }, up);
          return;
        }
        if (f.st === 0 && b === 0x22) {
          const keys: { key: number[]; idx: number }[] = [];
          for (let j = f.i + 1; j < props.length; j++) {
            keys.push({ key: props[j].key, idx: j });
            if (props[j].required) break;
          }
          if (keys.length) push({ t: 'K', keys, pos: 1 }, { f, up, ws: 0 });
        }
        return;
      }
      if (f.st === 1 && b === 0x3a) {
        const parent: Thread = { f: { ...f, st: 2 }, up, ws: 0 };
        push({ t: 'V', node: props[f.i].node }, parent);
      }
      return;
    }
    case 'F': {
      if (WS(b)) { if (wsOk) push(f, up, th.ws + 1); return; }
      if (f.st === 0 && b === 0x7d) { out.push(popDone()); return; }
      if ((f.st === 0 || f.st === 3) && b === 0x22) { push({ t: 'S', min: 0, max: Infinity, len: 0, esc: 0, u: 0 }, { f: { t: 'F', st: 1 }, up, ws: 0 }); return; }
      if (f.st === 1 && b === 0x3a) { push({ t: 'V', node: { k: 'any' } }, { f: { t: 'F', st: 2 }, up, ws: 0 }); return; }
      if (f.st === 2 && b === 0x2c) { push({ t: 'F', st: 3 }, up); return; }
      if (f.st === 2 && b === 0x7d) { out.push(popDone()); return; }
      return;
    }
    case 'A': {
      if (WS(b)) { if (wsOk) push(f, up, th.ws + 1); return; }
      const node = f.node;
      if (b === 0x5d && (f.st === 1 || f.n === 0) && f.n >= node.min) { out.push(popDone()); return; }
      if (f.st === 1 && b === 0x2c && f.n < node.max) { push({ ...f, st: 0 }, up); return; }
      if (f.st === 0 && f.n < node.max) {
        const parent: Thread = { f: { ...f, n: f.n + 1, st: 1 }, up, ws: 0 };
        startValue(node.items, parent, b, out);
      }
      return;
    }
  }
}

/** Begins a value of `node` with byte b (no leading whitespace here). */
function startValue(node: Node, up: Thread | null, b: number, out: Thread[]): void {
  switch (node.k) {
    case 'ref': startValue(node.target(), up, b, out); return;
    case 'union': for (const a of node.alts) startValue(a, up, b, out); return;
    case 'any':
      for (const a of ANY_ALTS) startValue(a, up, b, out);
      return;
    case 'obj': if (b === 0x7b) out.push({ f: { t: 'O', node, i: -1, st: 0 }, up, ws: 0 }); return;
    case 'freeobj': if (b === 0x7b) out.push({ f: { t: 'F', st: 0 }, up, ws: 0 }); return;
    case 'arr': if (b === 0x5b) out.push({ f: { t: 'A', node, n: 0, st: 0 }, up, ws: 0 }); return;
    case 'str': if (b === 0x22) out.push({ f: { t: 'S', min: node.min, max: node.max, len: 0, esc: 0, u: 0 }, up, ws: 0 }); return;
    case 'num': step({ f: { t: 'N', int: node.int, st: 0, d: 0 }, up, ws: 0 }, b, out); return;
    case 'lit': step({ f: { t: 'L', values: node.values, pos: 0 }, up, ws: 0 }, b, out); return;
  }
}
const ANY_ARR: Node = { k: 'arr', items: { k: 'any' }, min: 0, max: Infinity };
const ANY_ALTS: Node[] = [{ k: 'freeobj' }, ANY_ARR, { k: 'str', min: 0, max: Infinity }, { k: 'num', int: false }, { k: 'lit', values: [bytesOf('true'), bytesOf('false'), bytesOf('null')] }];
(ANY_ARR as { items: Node }).items = { k: 'any' };

/** A set of threads (deduplicated by key). */
function advanceSet(threads: Thread[], b: number): Thread[] {
  const out: Thread[] = [];
  for (const th of threads) if (th !== DONE) step(th, b, out);
  if (out.length <= 1) return out;
  const seen = new Set<string>();
  return out.filter((t) => {
    const k = threadKey(t);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** Can the threads end here (a complete top-level value)? Numbers/literals complete at the top count. */
function canEnd(threads: Thread[]): boolean {
  for (const th of threads) {
    if (th === DONE) return true;
    if (th.up === null) {
      const f = th.f;
      if (f.t === 'N' && (f.st === 2 || f.st === 3 || f.st === 5 || f.st === 8)) return true;
      if (f.t === 'L' && f.values.some((v) => v.length === f.pos)) return true;
    }
  }
  return false;
}

// ---- token trie -----------------------------------------------------------------------------------------
interface Trie {
  /** children of node n: edges in [first[n], first[n+1]) of (byte, child) */
  first: Int32Array;
  edgeByte: Uint8Array;
  edgeChild: Int32Array;
  /** tokens ending at node n: [tokFirst[n], tokFirst[n+1]) into tokIds */
  tokFirst: Int32Array;
  tokIds: Int32Array;
}

const trieCache = new WeakMap<object, Trie>();

function buildTrie(tok: ConstraintTokenizer): Trie {
  const hit = trieCache.get(tok);
  if (hit) return hit;
  // build with Maps, then flatten to arrays (BFS order)
  const kids: Map<number, number>[] = [new Map()];
  const ends: number[][] = [[]];
  for (let id = 0; id < tok.vocabSize; id++) {
    if (tok.specialIds.has(id)) continue;
    const bytes = tok.tokenBytes(id);
    if (bytes.length === 0) continue;
    let n = 0;
    for (const b of bytes) {
      let c = kids[n].get(b);
      if (c === undefined) {
        c = kids.length;
        kids.push(new Map());
        ends.push([]);
        kids[n].set(b, c);
      }
      n = c;
    }
    ends[n].push(id);
  }
  const N = kids.length;
  const first = new Int32Array(N + 1), tokFirst = new Int32Array(N + 1);
  let e = 0, t = 0;
  for (let n = 0; n < N; n++) { first[n] = e; e += kids[n].size; tokFirst[n] = t; t += ends[n].length; }
  first[N] = e; tokFirst[N] = t;
  const edgeByte = new Uint8Array(e), edgeChild = new Int32Array(e), tokIds = new Int32Array(t);
  for (let n = 0; n < N; n++) {
    let i = first[n];
    for (const [b, c] of [...kids[n]].sort((x, y) => x[0] - y[0])) { edgeByte[i] = b; edgeChild[i] = c; i++; }
    tokIds.set(ends[n], tokFirst[n]);
  }
  const trie = { first, edgeByte, edgeChild, tokFirst, tokIds };
  trieCache.set(tok, trie);
  return trie;
}

export interface ConstraintState {
  /** Bitset over the vocabulary (⌈V/32⌉ words): tokens that keep the output a valid prefix; EOS only when complete. */
  allowed(): Uint32Array;
  /** Consumes a generated token (throws if it was not allowed). */
  advance(token: number): void;
  /** The output is a complete value and nothing but EOS can follow. */
  readonly done: boolean;
  /** The output is a complete value (EOS allowed). */
  readonly canEnd: boolean;
}

export interface JsonConstraint {
  start(): ConstraintState;
  /** Mask computations and cache hits so far (for benchmarks). */
  readonly stats: { computed: number; cached: number };
}

/**
 * Lazily built DFA over matcher thread sets: each distinct set (by key) gets an id, transitions are cached in
 * a flat table (trans[id·256 + byte]: -2 unknown, -1 dead), so the trie walks are array lookups once warm.
 */
class LazyDfa {
  private sets: Thread[][] = [];
  private ids = new Map<string, number>();
  private trans = new Int32Array(256 * 64).fill(-2);
  private ends: boolean[] = [];
  private dones: boolean[] = [];

  intern(threads: Thread[]): number {
    const key = threads.map(threadKey).sort().join('#');
    let id = this.ids.get(key);
    if (id !== undefined) return id;
    id = this.sets.length;
    this.sets.push(threads);
    this.ids.set(key, id);
    this.ends.push(canEnd(threads));
    this.dones.push(threads.length > 0 && threads.every((t) => t === DONE));
    if ((id + 1) * 256 > this.trans.length) {
      const t = new Int32Array(this.trans.length * 2).fill(-2);
      t.set(this.trans);
      this.trans = t;
    }
    return id;
  }

  next(id: number, b: number): number {
    const k = id * 256 + b;
    let n = this.trans[k];
    if (n !== -2) return n;
    const out = advanceSet(this.sets[id], b);
    n = out.length ? this.intern(out) : -1;
    this.trans[k] = n;
    return n;
  }

  canEnd(id: number): boolean {
    return this.ends[id];
  }

  done(id: number): boolean {
    return this.dones[id];
  }

  get size(): number {
    return this.sets.length;
  }
}

/** Compiles `schema` against `tok`'s vocabulary. Compile once per (tokenizer, schema) and reuse. */
export function compileJsonSchema(schema: object, tok: ConstraintTokenizer): JsonConstraint {
  const root = compileSchema(schema);
  const trie = buildTrie(tok);
  const V = tok.vocabSize;
  const W = Math.ceil(V / 32);
  const dfa = new LazyDfa();
  const startId = dfa.intern([{ f: { t: 'V', node: root }, up: null, ws: 0 }]);
  const masks = new Map<number, Uint32Array>();
  const stats = { computed: 0, cached: 0 };
  const eos = tok.eosIds.filter((i) => i >= 0 && i < V);
  const { first, edgeByte, edgeChild, tokFirst, tokIds } = trie;

  const computeMask = (sid: number): Uint32Array => {
    const bits = new Uint32Array(W);
    // DFS over the trie carrying the DFA state
    const stackNode: number[] = [0];
    const stackState: number[] = [sid];
    while (stackNode.length) {
      const n = stackNode.pop()!;
      const st = stackState.pop()!;
      for (let e = first[n]; e < first[n + 1]; e++) {
        const nx = dfa.next(st, edgeByte[e]);
        if (nx < 0) continue;
        const c = edgeChild[e];
        for (let t = tokFirst[c]; t < tokFirst[c + 1]; t++) {
          const id = tokIds[t];
          bits[id >>> 5] |= 1 << (id & 31);
        }
        if (first[c + 1] > first[c]) {
          stackNode.push(c);
          stackState.push(nx);
        }
      }
    }
    if (dfa.canEnd(sid)) for (const id of eos) bits[id >>> 5] |= 1 << (id & 31);
    return bits;
  };

  // Up front: search (breadth-first over DFA states, token by token) for a token sequence that completes a
  // value. Proven impossible (the reachable states run out) → ConstraintUnsatisfiableError; a search that
  // exceeds its budget proves nothing and lets the request run.
  const checkFeasible = (): void => {
    // every byte has a one-byte token (byte-level BPE, byte fallback): any JSON text can be spelled
    let single = 0;
    for (let e = first[0]; e < first[1]; e++) if (tokFirst[edgeChild[e] + 1] > tokFirst[edgeChild[e]]) single++;
    if (single === 256) return;
    const seen = new Set<number>([startId]);
    const queue: number[] = [startId];
    for (let expanded = 0; queue.length && expanded < 48; expanded++) {
      const sid = queue.shift()!;
      if (dfa.canEnd(sid)) return;
      const stackNode: number[] = [0];
      const stackState: number[] = [sid];
      while (stackNode.length) {
        const n = stackNode.pop()!;
        const st = stackState.pop()!;
        for (let e = first[n]; e < first[n + 1]; e++) {
          const nx = dfa.next(st, edgeByte[e]);
          if (nx < 0) continue;
          const c = edgeChild[e];
          if (tokFirst[c + 1] > tokFirst[c] && !seen.has(nx)) {
            if (dfa.canEnd(nx)) return;
            seen.add(nx);
            queue.push(nx);
          }
          if (first[c + 1] > first[c]) {
            stackNode.push(c);
            stackState.push(nx);
          }
        }
      }
    }
    if (queue.length) return; // budget exhausted: not proven impossible
    // name the first byte the vocabulary lacks: what a valid value could start with after whitespace
    const starts: string[] = [];
    for (let b = 0x21; b < 0x7f; b++) if (dfa.next(startId, b) >= 0) starts.push(String.fromCharCode(b));
    throw new ConstraintUnsatisfiableError(
      `the model's tokenizer cannot produce JSON for this schema: no sequence of its ${V} tokens spells a complete value ` +
      `(a value must start with one of ${JSON.stringify(starts.join(''))}; the vocabulary has no token for the characters it needs and no byte fallback)`,
    );
  };
  checkFeasible();

  const start = (): ConstraintState => {
    let sid = startId;
    let finished = false;
    return {
      allowed(): Uint32Array {
        if (finished) {
          const b = new Uint32Array(W);
          for (const id of eos) b[id >>> 5] |= 1 << (id & 31);
          return b;
        }
        let m = masks.get(sid);
        if (m) stats.cached++;
        else {
          stats.computed++;
          m = computeMask(sid);
          if (masks.size >= 4096) masks.clear(); // bound memory (V/8 bytes per mask)
          masks.set(sid, m);
        }
        return m;
      },
      advance(token: number): void {
        if (eos.includes(token)) {
          if (!finished && !dfa.canEnd(sid)) throw new JsonSchemaError('EOS before the JSON value is complete');
          finished = true;
          return;
        }
        if (finished) throw new JsonSchemaError(`token ${token} after the end of the JSON value`);
        let s2 = sid;
        for (const b of tok.tokenBytes(token)) {
          s2 = dfa.next(s2, b);
          if (s2 < 0) throw new JsonSchemaError(`token ${token} is not allowed here`);
        }
        if (tok.tokenBytes(token).length === 0) throw new JsonSchemaError(`token ${token} (special or empty) is not allowed here`);
        sid = s2;
      },
      get done(): boolean {
        return finished || dfa.done(sid);
      },
      get canEnd(): boolean {
        return finished || dfa.canEnd(sid);
      },
    };
  };
  return { start, stats };
}
