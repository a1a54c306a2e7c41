// numeric_match: 1 when the last number in the completion equals the answer's number within
// |c − a| ≤ 1e-6 · max(1, |a|) (absolute 1e-6 near zero, relative beyond 1), else 0.
//
// A number is an optional sign, digits with optional thousands separators (`1,234,567`), an
// optional decimal part and exponent (`-3.5`, `.5`, `2e-3`), or a fraction `3/4`; a trailing `%`
// is kept as written (50% reads 50). The answer's number is its last number too, so GSM8K-style
// answers ("… #### 42") work as they are. A completion with no number scores 0; an answer with
// none is an error.

const NUMBER = /(?<![\w.])([-+−]?)(\d{1,3}(?:,\d{3})+|\d+)?(?:\.(\d+))?(?:[eE]([-+]?\d+))?(?:\/(\d+))?/g;

export const NUMERIC_TOLERANCE = 1e-6;

/** The last number written in `s`, or null. */
export function lastNumber(s: string): number | null {
  let out: number | null = null;
  NUMBER.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = NUMBER.exec(s)) !== null) {
    if (m[0] === '' ) {
      NUMBER.lastIndex++;
      continue;
    }
    const [, sign, int, frac, exp, den] = m;
    if (int === undefined && frac === undefined) continue; // a lone sign or "e5"
    let v = Number(`${(int ?? '0').replace(/,/g, '')}.${frac ?? '0'}${exp !== undefined ? `e${exp}` : ''}`);
    if (den !== undefined) {
      const d = Number(den);
      if (d === 0) continue;
      v /= d;
    }
    if (sign === '-' || sign === '−') v = -v;
    if (Number.isFinite(v)) out = v;
  }
  return out;
}

export function numericMatch(completion: string, answer: string): number {
  const want = lastNumber(answer);
  if (want === null) throw new Error(`numeric_match: the answer ${JSON.stringify(answer.slice(0, 40))} holds no number`);
  const got = lastNumber(completion);
  if (got === null) return 0;
  return Math.abs(got - want) <= NUMERIC_TOLERANCE * Math.max(1, Math.abs(want)) ? 1 : 0;
}
