import t from 'tap';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';
import { compileJsonSchema, JsonSchemaError } from '../../src/runtime/json-constraint.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');

const schemas: Record<string, object> = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer' },
      email: { type: ['string', 'null'] },
      tags: { type: 'array', items: { type: 'string', enum: ['a', 'bb', 'ccc'] }, minItems: 1, maxItems: 3 },
      score: { type: 'number' },
      active: { type: 'boolean' },
      address: { type: 'object', properties: { city: { type: 'string' }, zip: { const: 12345 } }, required: ['city'], additionalProperties: false },
    },
    required: ['name', 'age', 'tags'],
    additionalProperties: false,
  },
  list: { type: 'array', items: { anyOf: [{ type: 'integer' }, { type: 'null' }, { enum: ['x', 1.5, true] }] }, maxItems: 4 },
  any: { type: 'object' },
  refs: { $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } }, required: ['v', 'next'] } }, $ref: '#/$defs/node' },
};

function bitsetIds(b: Uint32Array, V: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < V; i++) if ((b[i >>> 5] >>> (i & 31)) & 1) out.push(i);
  return out;
}

t.test('random walks through allowed tokens always produce valid JSON (minueza 32k vocab)', async (t) => {
  const tok = await Tokenizer.fromDir(join(shared, 'models/minueza-32m-ultrachat-tokenizer'));
  const ajv = new Ajv();
  let seed = 12345;
  const rnd = (): number => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const eos = tok.eosIds[0];
  const first = Array.from({ length: tok.vocabSize }, (_, i) => String.fromCharCode(tok.tokenBytes(i)[0] ?? 0));
  for (const [name, schema] of Object.entries(schemas)) {
    const validate = ajv.compile(schema);
    const c = compileJsonSchema(schema, tok);
    for (let run = 0; run < 5; run++) {
      const st = c.start();
      const ids: number[] = [];
      let ended = false;
      for (let step = 0; step < 600; step++) {
        const allowed = bitsetIds(st.allowed(), tok.vocabSize);
        t.ok(allowed.length > 0, 'something is always allowed') || (step = 1e9);
        // prefer closing structure as the walk gets long so that it ends
        let pick: number;
        const closers = allowed.filter((id) => id === eos || /^[\]}"]/.test(first[id]));
        if (allowed.includes(eos) && (step > 60 || rnd() < 0.3)) pick = eos;
        else if (step > 80 && closers.length) pick = closers[Math.floor(rnd() * closers.length)];
        else pick = allowed[Math.floor(rnd() * allowed.length)];
        st.advance(pick);
        if (pick === eos) { ended = true; break; }
        ids.push(pick);
      }
      t.ok(ended, `${name}: walk ended with EOS`);
      t.ok(st.done);
      const text = tok.decode(ids);
      let v: unknown;
      try { v = JSON.parse(text); } catch { t.fail(`${name}: not JSON: ${text}`); continue; }
      if (!validate(v)) t.fail(`${name}: invalid ${text} ${JSON.stringify(validate.errors)}`);
      else t.pass(`${name} run ${run} valid`);
    }
  }
});

t.test('masks: EOS only when complete, illegal tokens rejected', async (t) => {
  const tok = await Tokenizer.fromDir(join(shared, 'models/minueza-32m-ultrachat-tokenizer'));
  const c = compileJsonSchema({ type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] }, tok);
  const st = c.start();
  const eos = tok.eosIds[0];
  const has = (id: number): boolean => ((st.allowed()[id >>> 5] >>> (id & 31)) & 1) === 1;
  t.notOk(has(eos));
  const word = tok.encode('hello', { addSpecialTokens: false })[0];
  const brace = tok.encode('}', { addSpecialTokens: false }).at(-1)!;
  t.notOk(has(word));
  for (const id of tok.encode('{"ok": true}', { addSpecialTokens: false })) {
    t.ok(has(id), `token ${tok.idToToken(id)} allowed`);
    st.advance(id);
  }
  t.ok(has(eos));
  t.ok(st.done);
  t.throws(() => st.advance(brace), JsonSchemaError);
  const st2 = c.start();
  t.throws(() => st2.advance(word), JsonSchemaError);
  t.ok(c.stats.cached + c.stats.computed > 0);
});

t.test('unsupported schemas are rejected clearly', async (t) => {
  const tok = await Tokenizer.fromDir(join(shared, 'models/tinystories-656k'));
  t.throws(() => compileJsonSchema({ type: 'string', pattern: 'a+' }, tok), /pattern/);
  t.throws(() => compileJsonSchema({ type: 'object', properties: {}, required: ['x'] }, tok), /required/);
  t.throws(() => compileJsonSchema({ $ref: '#/nope' }, tok), /\$ref/);
  t.throws(() => compileJsonSchema({ type: 'tuple' }, tok), /tuple/);
});
