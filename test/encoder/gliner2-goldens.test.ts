// GLiNER2 pipeline vs the reference library's goldens (../shared/goldens/gliner2-tiny-span with
// count_lstm_v2, gliner2-tiny-span-lstm with count_lstm): exact input ids and routing positions,
// intermediate tensors (encoder states, word embeddings, span_rep, schema embeddings, count logits,
// count embeddings, span scores, classifier logits) ≤ 1e-4, and the exact returned JSON
// (format 'gliner2', confidence ≤ 1e-4) for every case.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsFile, toIntArray } from '../../src/formats/safetensors.ts';
import { Gliner2Model } from '../../src/models/encoder/gliner2.ts';

const root = join(import.meta.dirname, '../../../shared/goldens');

/** Golden call → (schema input in the service's shape, options). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function callToSchema(call: any): { schemas: unknown[]; texts: string[]; opts: Record<string, unknown> } {
  const a = call.args ?? {};
  const opts = { threshold: a.threshold ?? 0.5, include_confidence: a.include_confidence ?? false, include_spans: a.include_spans ?? false };
  const texts: string[] = call.texts ?? [call.text];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const fromOps = (ops: any[]) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const s: any = {};
    for (const op of ops) {
      if (op.op === 'structure') (s.structures ??= {})[op.name] = op.fields;
      else if (op.op === 'entities') s.entities = op.args.entity_types;
      else if (op.op === 'classification') (s.classifications ??= []).push(op.args);
      else if (op.op === 'relations') s.relations = op.args.relation_types;
    }
    return s;
  };
  let schema: unknown;
  switch (call.method) {
    case 'extract_entities':
    case 'batch_extract_entities':
      schema = { entities: a.entity_types };
      break;
    case 'classify_text':
      schema = {
        classifications: Object.entries(a.tasks).map(([task, v]) => (Array.isArray(v) ? { task, labels: v } : { task, ...(v as object) })),
      };
      break;
    case 'extract_json':
      schema = { structures: a.structures };
      break;
    case 'extract_relations':
      schema = { relations: a.relation_types };
      break;
    case 'extract':
      schema = call.schema_dict ?? fromOps(call.schema_ops);
      break;
    case 'batch_extract':
      return { schemas: call.schemas_ops.map(fromOps), texts, opts };
    default:
      throw new Error(`unknown method ${call.method}`);
  }
  return { schemas: texts.map(() => schema), texts, opts };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
function sameJson(t: any, got: unknown, want: unknown, path: string): void {
  if (typeof want === 'number' && typeof got === 'number') {
    if (Math.abs(got - want) > 1e-4) t.fail(`${path}: ${got} vs ${want}`);
    return;
  }
  if (Array.isArray(want)) {
    if (!Array.isArray(got) || got.length !== want.length) return void t.fail(`${path}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
    want.forEach((w, i) => sameJson(t, got[i], w, `${path}[${i}]`));
    return;
  }
  if (want && typeof want === 'object') {
    if (!got || typeof got !== 'object' || Array.isArray(got)) return void t.fail(`${path}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
    const gk = Object.keys(got);
    const wk = Object.keys(want);
    if (JSON.stringify(gk) !== JSON.stringify(wk)) return void t.fail(`${path}: keys ${JSON.stringify(gk)} vs ${JSON.stringify(wk)}`);
    for (const k of wk) sameJson(t, (got as Record<string, unknown>)[k], (want as Record<string, unknown>)[k], `${path}.${k}`);
    return;
  }
  if (got !== want) t.fail(`${path}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`);
}

function maxDiff(a: Float32Array | undefined, b: Float32Array, valid?: (i: number) => boolean): number {
  if (!a || a.length !== b.length) return Infinity;
  let m = 0;
  for (let i = 0; i < b.length; i++) if (!valid || valid(i)) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

for (const fixture of ['gliner2-tiny-span', 'gliner2-tiny-span-lstm']) {
  t.test(fixture, async (t) => {
    const dir = join(root, fixture);
    const golden = JSON.parse(readFileSync(join(dir, 'cases.json'), 'utf8'));
    const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
    const model = await Gliner2Model.load(dir);
    t.equal(model.info.countingLayer, fixture.endsWith('lstm') ? 'count_lstm' : 'count_lstm_v2', 'counting layer detected from keys');
    for (const [m, id] of Object.entries(golden.special_token_ids)) if (m.startsWith('[') && model.tokenizer.markerIds[m] !== undefined) t.equal(model.tokenizer.markerIds[m], id, m);

    for (const c of golden.cases) {
      await t.test(c.name, async (t) => {
        const { schemas, texts, opts } = callToSchema(c.call);
        const samples = c.processed.flatMap((p: { samples: unknown[] }) => p.samples);
        const fieldPromptOrder = Object.assign({}, ...samples.map((s: { structure_field_prompt_order?: object }) => s.structure_field_prompt_order ?? {}));
        // 1. input formatting: exact ids and routing
        for (let i = 0; i < texts.length; i++) {
          const { normalizeSchema } = await import('../../src/models/encoder/schema.ts');
          const f = await model.format(texts[i], normalizeSchema(schemas[i]), { fieldPromptOrder });
          const s = samples[i];
          t.same(f.processorTokens, s.processor_tokens, `processor tokens ${i}`);
          t.same(Array.from(f.ids), s.input_ids, `input ids ${i}`);
          t.same(Array.from(f.wordPos), s.text_word_first_positions, `word positions ${i}`);
          t.same(f.specialPos.map((p) => Array.from(p)), s.schema_special_positions, `schema positions ${i}`);
          t.equal(f.text, s.text_after_preprocessing);
        }
        // 2. the returned JSON
        const items = texts.map((text, i) => ({ text, schema: schemas[i] }));
        const res = await model.extractMany(items, { ...opts, format: 'gliner2', fieldPromptOrder });
        const got = Array.isArray(c.result) ? res : res[0];
        const before = t.counts.fail;
        sameJson(t, got, c.result, 'result');
        if (t.counts.fail === before) t.pass('result JSON identical');
        // 3. intermediates
        if (c.intermediate_tensors) {
          const { inter } = await model.debugRun(texts[0], schemas[0], { fieldPromptOrder, format: 'gliner2' });
          const key = (k: string) => expected.float32(k);
          t.same(Array.from(inter.ids), toIntArray(expected.get(`${c.name}.input_ids`)), 'ids tensor');
          t.ok(maxDiff(inter.hidden, key(`${c.name}.encoder.last_hidden_state`)) <= 1e-4, 'encoder states');
          t.ok(maxDiff(inter.wordEmbeddings, key(`${c.name}.word_embeddings`)) <= 1e-4, 'word embeddings');
          const W = inter.wordEmbeddings.length / model.info.hiddenSize;
          const D = model.info.hiddenSize;
          const K = model.info.maxWidth;
          t.ok(maxDiff(inter.spanRep, key(`${c.name}.span_rep`), (i) => Math.floor(i / (K * D)) + (Math.floor(i / D) % K) < W) <= 1e-4, 'span_rep');
          for (const it of c.intermediate_tensors) {
            const seg = inter.segments[it.segment];
            t.ok(maxDiff(seg.schemaEmbs, key(it.schema_embs)) <= 1e-4, `${it.name} schema_embs`);
            if (it.cls_logits) t.ok(maxDiff(seg.cls, key(it.cls_logits)) <= 1e-4, `${it.name} cls logits`);
            else {
              t.ok(maxDiff(seg.countLogits, key(it.count_logits)) <= 1e-4, `${it.name} count logits`);
              t.equal(seg.count, it.predicted_count, `${it.name} count`);
              t.ok(maxDiff(seg.countEmbed, key(it.count_embed)) <= 1e-4, `${it.name} count_embed`);
              t.ok(maxDiff(seg.scores, key(it.span_scores), (i) => (Math.floor(i / K) % W) + (i % K) < W) <= 1e-4, `${it.name} span scores`);
            }
          }
        }
      });
    }
  });
}
