// Regex validators on structure fields: schema parsing and errors, case-insensitive matching on the
// linear-time engine (checked against V8's own `i` flag on the default engine), full/partial/
// exclude semantics, no catastrophic backtracking, and filtering of extracted field values.
import t from 'tap';
import { join } from 'node:path';
import { loadEncoder, normalizeSchema, SchemaError } from '../../src/models/encoder/index.ts';
import { caseless, compileValidator, parseValidator, passesValidators } from '../../src/models/encoder/validators.ts';

t.test('case-insensitive rewrite matches what the i flag matches', async (t) => {
  const patterns = ['hello', '[a-f]+\\d', '^[A-Z][a-z]+$', '[^aeiou]+', 'ß|é', 'x{2,3}y', '(?<word>ab)c', '[\\w.]+@[a-z]+\\.com', 'Ö[k-o]', '[-a]z', '[a\\]]b', '\\x41B', '(?:ab)+', 'a|B|c', 'a\\u{', '\\x4z', '\\uZZ', '[\\x4]'];
  const inputs = ['au{', 'AU{', 'x4z', 'X4Z', 'uZZ', 'UZZ', '4', 'X', 'hello', 'HeLLo', 'HELLO world', 'abc1', 'ABF9', 'Zebra', 'zEBRA', 'Zz', 'bcd', 'AEIOU', 'é', 'É', 'XXY', 'xxxy', 'abc', 'ABC', 'John.Doe@Mail.COM', 'öK', 'ÖM', '-Z', 'AZ', ']B', 'ab', 'ABAB', 'b', 'C'];
  for (const p of patterns) {
    const ours = new RegExp(caseless(p)); // same rewrite on the default engine, so only the rewrite is compared
    const ref = new RegExp(p, 'i');
    for (const s of inputs) t.equal(ours.test(s), ref.test(s), `${p} on ${JSON.stringify(s)}`);
  }
});

t.test('modes, exclude, ignore_case', async (t) => {
  const email = parseValidator({ pattern: '[^@]+@[^@]+', mode: 'partial', ignore_case: false }, 'v');
  t.ok(passesValidators('a@b.com', [email]));
  t.notOk(passesValidators('nope', [email]));
  const full = parseValidator({ pattern: '\\d{3}-\\d{4}' }, 'v'); // default mode full
  t.ok(passesValidators('555-1234', [full]));
  t.notOk(passesValidators('call 555-1234 now', [full]), 'full mode needs the whole text');
  const partial = parseValidator({ pattern: '\\d{3}-\\d{4}', mode: 'partial' }, 'v');
  t.ok(passesValidators('call 555-1234 now', [partial]));
  const noCorp = parseValidator({ pattern: 'inc\\.?$', mode: 'partial', exclude: true }, 'v');
  t.notOk(passesValidators('Acme INC.', [noCorp]), 'exclude inverts, case-insensitive by default');
  t.ok(passesValidators('Acme', [noCorp]));
  t.notOk(passesValidators('555-1234', [full, noCorp, email]), 'all must pass');
  const cs = parseValidator({ pattern: 'ACME', ignore_case: false }, 'v');
  t.notOk(passesValidators('acme', [cs]));
  t.ok(passesValidators('acme', [parseValidator({ pattern: '(?i)ACME' }, 'v')]), 'leading (?i)');
  t.ok(passesValidators('Paris', [parseValidator({ pattern: '\\A(?P<city>[a-z]+)\\Z' }, 'v')]), 'Python spellings');
  t.ok(passesValidators('x', [parseValidator('x', 'v')]), 'a bare string is a full-match pattern');
});

t.test('bad validators are schema errors; no pattern can stall the process', async (t) => {
  for (const bad of [{}, { pattern: '' }, { pattern: '(' }, { pattern: 'a', mode: 'exact' }, { pattern: 'a', exclude: 'yes' }, { pattern: '(a)\\1' }, { pattern: '(?<=a)b' }, { pattern: 'x'.repeat(2000) }, { pattern: 'a(?P=n)' }, 3])
    t.throws(() => parseValidator(bad, 'v'), SchemaError, JSON.stringify(bad));
  t.throws(() => normalizeSchema({ structures: { p: [{ name: 'f', validators: 'x' }] } }), SchemaError);
  t.throws(() => normalizeSchema({ structures: { p: [{ name: 'f', validators: [{ pattern: '[' }] }] } }), /not a valid regular expression/);
  // the classic catastrophic pattern: seconds to minutes on a backtracking engine, instant here
  // escapes without their digits (\u{ is not an escape without the u flag) are parsed, not looped on
  t.ok(passesValidators('xau{', [parseValidator({ pattern: 'a\\u{', mode: 'partial' }, 'v')]));
  const evil = compileValidator(parseValidator({ pattern: '^(a+)+$' }, 'v'));
  const t0 = Date.now();
  t.notOk(evil.test('a'.repeat(5000) + '!'));
  t.ok(Date.now() - t0 < 2000, `linear time (${Date.now() - t0} ms)`);
});

t.test('validators filter extracted field values', async (t) => {
  const model = await loadEncoder(join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span'));
  const text = 'Contact John Smith at john.smith@example.com or call 555-1234 for the Berlin office.';
  const base = await model.extract(text, { structures: { contact: [{ name: 'value', dtype: 'list' }] } }, { threshold: 0 });
  const all = (base.structures!.contact as Record<string, { text: string }[]>[]).flatMap((i) => i.value ?? []).map((v) => v.text);
  t.ok(all.length > 3, `tiny model proposes many spans at threshold 0 (${all.length})`);
  const digits = await model.extract(text, { structures: { contact: [{ name: 'value', dtype: 'list', validators: [{ pattern: '[0-9-]+' }] }] } }, { threshold: 0 });
  const kept = (digits.structures!.contact as Record<string, { text: string }[]>[]).flatMap((i) => i.value ?? []).map((v) => v.text);
  t.ok(kept.length >= 1 && kept.length < all.length, `kept ${JSON.stringify(kept)}`);
  for (const k of kept) t.match(k, /^[0-9-]+$/);
  const excl = await model.extract(text, { structures: { contact: [{ name: 'value', dtype: 'list', validators: [{ pattern: '\\d', mode: 'partial', exclude: true }] }] } }, { threshold: 0 });
  const rest = (excl.structures!.contact as Record<string, { text: string }[]>[]).flatMap((i) => i.value ?? []).map((v) => v.text);
  for (const k of rest) t.notMatch(k, /\d/);
  t.ok(rest.length > 0);
});
