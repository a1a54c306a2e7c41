// Regex validators on structure fields (the reference library's RegexValidator): a field's candidate
// spans are kept only if every validator passes. Spec form, as the reference's JSON schema takes it:
//   {pattern, mode?: "full" | "partial" (default "full": the whole span text must match; "partial":
//    a match anywhere), exclude?: boolean (invert), ignore_case?: boolean (default true)}
//
// Patterns come from API callers, so they run on V8's linear-time regexp engine (the `l` flag):
// no pattern can backtrack exponentially and stall the process (a 30-character input against
// /^(a+)+$/i takes about a minute on the default engine). That engine has no `i` or `u` flag and
// no backreferences or lookaround: case-insensitivity is rewritten into the pattern (`a` → `[aA]`,
// classes gain their letters' other case), and patterns it cannot run are refused with a
// SchemaError. Python spellings `(?P<name>…)`, `\A`, `\Z` and a leading `(?i)` are accepted.
// Differences from Python `re` left as they are: `\w`, `\d`, `\b` are ASCII-only, and patterns see
// UTF-16 code units.
import v8 from 'node:v8';
import { SchemaError } from './schema.ts';

export interface ValidatorSpec {
  pattern: string;
  mode: 'full' | 'partial';
  exclude: boolean;
  ignoreCase: boolean;
}

export const MAX_PATTERN_LENGTH = 1000;
export const MAX_VALIDATORS = 16;

let engineEnabled = false;
function linearEngine(): void {
  if (engineEnabled) return;
  // Process-wide V8 flag; it only makes the `l` flag available and changes nothing else.
  v8.setFlagsFromString('--enable-experimental-regexp-engine');
  engineEnabled = true;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses and validates one validator spec object (throws SchemaError). */
export function parseValidator(v: unknown, what: string): ValidatorSpec {
  if (typeof v === 'string') v = { pattern: v };
  if (!isObj(v)) throw new SchemaError(`${what} must be an object with a "pattern"`);
  const { pattern, mode = 'full', exclude = false, ignore_case = true } = v;
  if (typeof pattern !== 'string' || pattern === '') throw new SchemaError(`${what}.pattern must be a non-empty string`);
  if (pattern.length > MAX_PATTERN_LENGTH) throw new SchemaError(`${what}.pattern is longer than ${MAX_PATTERN_LENGTH} characters`);
  if (mode !== 'full' && mode !== 'partial') throw new SchemaError(`${what}.mode must be "full" or "partial"`);
  if (typeof exclude !== 'boolean') throw new SchemaError(`${what}.exclude must be a boolean`);
  if (typeof ignore_case !== 'boolean') throw new SchemaError(`${what}.ignore_case must be a boolean`);
  const spec: ValidatorSpec = { pattern, mode, exclude, ignoreCase: ignore_case };
  compileValidator(spec, what); // refuse bad patterns at schema time (422), not while decoding
  return spec;
}

const compiled = new Map<string, RegExp>();

/** The linear-time RegExp of a validator (cached). Throws SchemaError for patterns it cannot run. */
export function compileValidator(spec: ValidatorSpec, what = 'validator'): RegExp {
  const key = `${spec.mode}\0${spec.ignoreCase ? 1 : 0}\0${spec.pattern}`;
  const hit = compiled.get(key);
  if (hit) return hit;
  linearEngine();
  let src = spec.pattern;
  let ignoreCase = spec.ignoreCase;
  if (src.startsWith('(?i)')) {
    src = src.slice(4);
    ignoreCase = true;
  }
  src = fromPython(src, what);
  try {
    new RegExp(src); // syntax check only (compiling does not run it)
  } catch (e) {
    throw new SchemaError(`${what}.pattern is not a valid regular expression: ${(e as Error).message}`);
  }
  if (ignoreCase) src = caseless(src);
  if (spec.mode === 'full') src = `^(?:${src})$`;
  let re: RegExp;
  try {
    re = new RegExp(src, 'l');
  } catch (e) {
    const msg = (e as Error).message;
    if (/linear time/.test(msg))
      throw new SchemaError(`${what}.pattern ${JSON.stringify(spec.pattern)} uses backreferences or lookaround, which validators do not support (patterns must run in linear time)`);
    throw new SchemaError(`${what}.pattern ${JSON.stringify(spec.pattern)} is not supported: ${msg}`);
  }
  if (compiled.size > 4096) compiled.clear();
  compiled.set(key, re);
  return re;
}

/** True when `text` passes every validator (all must pass; `exclude` inverts one). */
export function passesValidators(text: string, specs: readonly ValidatorSpec[] | undefined): boolean {
  if (!specs?.length) return true;
  for (const s of specs) {
    const re = compileValidator(s);
    re.lastIndex = 0;
    if (re.test(text) === s.exclude) return false;
  }
  return true;
}

/** Python-only spellings → JavaScript: (?P<name>…) → (?<name>…), \A → ^, \Z → $. */
function fromPython(p: string, what: string): string {
  let out = '';
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    if (c === '\\' && i + 1 < p.length) {
      const n = p[i + 1];
      if (n === 'A') out += '^';
      else if (n === 'Z') out += '$';
      else out += c + n;
      i++;
    } else if (p.startsWith('(?P<', i)) {
      out += '(?<';
      i += 3;
    } else if (p.startsWith('(?P=', i)) {
      throw new SchemaError(`${what}.pattern uses a backreference, which validators do not support`);
    } else if (/^\(\?[aiLmsux]+[):]/.test(p.slice(i, i + 10)) && !p.startsWith('(?:', i)) {
      throw new SchemaError(`${what}.pattern: inline flags other than a leading (?i) are not supported`);
    } else out += c;
  }
  return out;
}

/** The other-case code units of `c` (one code unit each), excluding c itself. */
function otherCases(c: string): string[] {
  const out = new Set<string>();
  for (const v of [c.toLowerCase(), c.toUpperCase()]) if (v.length === 1 && v !== c) out.add(v);
  return [...out];
}

function classChar(c: string): string {
  return /[\\\]\[^-]/.test(c) ? '\\' + c : c;
}

/** The character an escape denotes when it is a literal (\xHH, \uHHHH, or a bare \u / \x: the letter), else null. */
function escapeLiteral(e: string): string | null {
  if (/^\\x[0-9a-fA-F]{2}$/.test(e) || /^\\u[0-9a-fA-F]{4}$/.test(e)) return String.fromCharCode(parseInt(e.slice(2), 16));
  if (e === '\\u' || e === '\\x') return e[1];
  return null;
}

/**
 * Escape sequence starting at p[i] === '\\': its length (at least 1), as a pattern without the u flag
 * reads it: \uHHHH and \xHH only with their hex digits (else `\u`, `\x` are the letters), \cX with a
 * letter, \k<name> to its `>`. (\u{…} is not an escape without the u flag: `u` then a quantifier.)
 */
function escapeLength(p: string, i: number): number {
  const n = p[i + 1];
  if (n === undefined) return 1;
  if (n === 'u' && /^[0-9a-fA-F]{4}$/.test(p.slice(i + 2, i + 6))) return 6;
  if (n === 'x' && /^[0-9a-fA-F]{2}$/.test(p.slice(i + 2, i + 4))) return 4;
  if (n === 'c' && /^[A-Za-z]$/.test(p[i + 2] ?? '')) return 3;
  if (n === 'k' && p[i + 2] === '<') {
    const close = p.indexOf('>', i + 3);
    if (close > 0) return close - i + 1;
  }
  return 2;
}

/**
 * Case-insensitive rewrite of a JavaScript pattern: every letter outside a class becomes a class
 * of its cases; a class gets the other cases of its single letters and of its ranges (ranges up to
 * 4096 code units are expanded; wider ones already span both cases in practice).
 */
export function caseless(p: string): string {
  let out = '';
  let i = 0;
  while (i < p.length) {
    const c = p[i];
    if (c === '\\') {
      const n = escapeLength(p, i);
      const e = p.slice(i, i + n);
      const lit = escapeLiteral(e);
      const v = lit ? otherCases(lit) : [];
      out += v.length ? `[${e}${v.map(classChar).join('')}]` : e;
      i += n;
    } else if (c === '[') {
      let j = i + 1;
      let head = '[';
      if (p[j] === '^') {
        head += '^';
        j++;
      }
      const extra = new Set<string>();
      let body = '';
      while (j < p.length && p[j] !== ']') {
        if (p[j] === '\\') {
          const n = escapeLength(p, j);
          const e = p.slice(j, j + n);
          const lit = escapeLiteral(e);
          if (lit) for (const v of otherCases(lit)) extra.add(v);
          body += e;
          j += n;
        } else if (p[j + 1] === '-' && p[j + 2] !== undefined && p[j + 2] !== ']' && p[j + 2] !== '\\') {
          const lo = p.charCodeAt(j), hi = p.charCodeAt(j + 2);
          body += p.slice(j, j + 3);
          if (hi >= lo && hi - lo <= 4096)
            for (let cp = lo; cp <= hi; cp++) for (const v of otherCases(String.fromCharCode(cp))) {
              const vc = v.charCodeAt(0);
              if (vc < lo || vc > hi) extra.add(v);
            }
          j += 3;
        } else {
          body += p[j];
          for (const v of otherCases(p[j])) extra.add(v);
          j++;
        }
      }
      out += head + body + [...extra].map(classChar).join('') + ']';
      i = j + 1;
    } else if (c === '(' && p[i + 1] === '?') {
      // group syntax: (?:  (?=  (?!  (?<=  (?<!  (?<name>  — copied, names keep their case
      const m = /^\(\?(?::|=|!|<=|<!|<[A-Za-z_$][\w$]*>)/.exec(p.slice(i));
      const n = m ? m[0].length : 2;
      out += p.slice(i, i + n);
      i += n;
    } else {
      const v = otherCases(c);
      out += v.length ? `[${classChar(c)}${v.map(classChar).join('')}]` : c;
      i++;
    }
  }
  return out;
}
