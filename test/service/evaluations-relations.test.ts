// Relation evaluation through HTTP (POST /felix/evaluations) on CoNLL04 rows, scored as strict
// (head span, tail span, relation label) triples, micro-averaged and per relation label, next to the
// entity scores: a dataset whose relations are the model's own predictions scores exactly 1; the
// CoNLL04 gold rows score what a direct count of matching triples says; a gold argument off by one
// character is a miss.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { poll, uploadDataset } from './customization-helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const ENC = join(shared, 'goldens/gliner2-tiny-span');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-releval-'));
symlinkSync(ENC, join(modelsDir, 'gliner2-tiny-span'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 10 });

type Ent = { start: number; end: number; label: string; text: string };
type Row = { text: string; entities: Ent[]; relations: { head: number; tail: number; label: string }[] };
const rows: Row[] = readFileSync(join(shared, 'data/conll04/dev.jsonl'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .slice(0, 8)
  .map((l) => JSON.parse(l));
const ENT_LABELS = [...new Set(rows.flatMap((r) => r.entities.map((e) => e.label)))].sort();
const REL_LABELS = [...new Set(rows.flatMap((r) => r.relations.map((x) => x.label)))].sort();
const enc = await loadEncoder(ENC);
// the evaluation asks for the dataset's entity and relation labels, sorted, in one schema
const preds = await enc.extract(
  rows.map((r) => r.text),
  { entities: ENT_LABELS, relations: REL_LABELS },
  { threshold: 0.5, include_spans: true, include_confidence: false },
);
const predTriples = preds.map(
  (p) =>
    new Set(
      Object.entries(p.relations ?? {}).flatMap(([label, l]) =>
        l.map((x) => JSON.stringify([x.head.start, x.head.end, x.tail.start, x.tail.end, label])),
      ),
    ),
);
const goldTriples = (r: Row) =>
  new Set(
    r.relations.map((x) =>
      JSON.stringify([
        r.entities[x.head].start,
        r.entities[x.head].end,
        r.entities[x.tail].start,
        r.entities[x.tail].end,
        x.label,
      ]),
    ),
  );

const evaluate = async (name: string, jsonl: string) => {
  t.equal((await uploadDataset(ts.url, u.key, name, 'ner', `${name}.jsonl`, jsonl)).body.status, 'ready');
  const r = await call(ts.url, 'POST', '/felix/evaluations', {
    key: u.key,
    body: { base_model: 'gliner2-tiny-span', dataset_name: name },
  });
  t.equal(r.status, 200);
  return poll(
    () => call(ts.url, 'GET', `/felix/evaluations/${r.body.evaluations[0].id}`, { key: u.key }),
    (x) => ['complete', 'failed'].includes(x.body.status),
    60_000,
  );
};

t.test('CoNLL04 gold rows: strict triples, micro and per relation type', async (t) => {
  const r = await evaluate('conll04', rows.map((x) => JSON.stringify(x)).join('\n'));
  t.equal(r.body.status, 'complete', r.body.error ?? '');
  t.match(r.body, { task: 'ner', sample_count: rows.length, relations: { per_label: Object } });
  t.ok(r.body.per_label.person, 'entity scores per label are still there');
  let tp = 0,
    fp = 0,
    fn = 0;
  const per: Record<string, { tp: number; fp: number; fn: number }> = {};
  const labelOf = (k: string) => JSON.parse(k)[4] as string;
  rows.forEach((row, i) => {
    const g = goldTriples(row);
    for (const k of predTriples[i]) {
      const c = (per[labelOf(k)] ??= { tp: 0, fp: 0, fn: 0 });
      if (g.has(k)) {
        tp++;
        c.tp++;
      } else {
        fp++;
        c.fp++;
      }
    }
    for (const k of g)
      if (!predTriples[i].has(k)) {
        fn++;
        (per[labelOf(k)] ??= { tp: 0, fp: 0, fn: 0 }).fn++;
      }
  });
  t.ok(tp + fn > 0 && tp + fp > 0, `gold ${tp + fn}, predicted ${tp + fp}, matching ${tp}`);
  t.match(r.body.relations, { tp, fp, fn, support: tp + fn });
  const p = tp + fp ? tp / (tp + fp) : 0,
    rc = tp + fn ? tp / (tp + fn) : 0;
  t.equal(r.body.relations.f1, Math.round((p + rc ? (2 * p * rc) / (p + rc) : 0) * 1e6) / 1e6);
  t.same(Object.keys(r.body.relations.per_label).sort(), REL_LABELS, 'one entry per relation label of the dataset');
  for (const [l, s] of Object.entries(
    r.body.relations.per_label as Record<string, { tp: number; fp: number; fn: number }>,
  ))
    t.match(s, per[l] ?? { tp: 0, fp: 0, fn: 0 }, `per relation: ${l}`);
});

t.test("the model's own relations score 1; an argument off by one character is a miss", async (t) => {
  // relations = the model's predictions (arguments added as entities where they are not gold entities)
  const self = rows.map((row, i) => {
    const entities = row.entities.slice();
    const idx = (s: number, e: number) => {
      let k = entities.findIndex((x) => x.start === s && x.end === e);
      if (k < 0) k = entities.push({ start: s, end: e, label: 'other', text: row.text.slice(s, e) }) - 1;
      return k;
    };
    const relations = [...predTriples[i]]
      .map((k) => JSON.parse(k) as [number, number, number, number, string])
      .map(([hs, he, ts2, te, label]) => ({ head: idx(hs, he), tail: idx(ts2, te), label }));
    return { text: row.text, entities, relations };
  });
  const labels = new Set(self.flatMap((x) => x.relations.map((y) => y.label)));
  t.same(
    [...labels].sort(),
    REL_LABELS,
    'the predictions use every relation label (so the evaluation asks for the same ones)',
  );
  const r = await evaluate('conll04-self', self.map((x) => JSON.stringify(x)).join('\n'));
  t.match(r.body, { status: 'complete', relations: { precision: 1, recall: 1, f1: 1, fp: 0, fn: 0 } });
  // the same, each relation's head moved one character left (a new, wrong entity span)
  const shifted = self.map((x) => {
    const entities = x.entities.slice();
    const relations = x.relations.map((rel) => {
      const h = entities[rel.head];
      const k = entities.push({ ...h, start: h.start + 1, text: x.text.slice(h.start + 1, h.end) }) - 1;
      return { ...rel, head: k };
    });
    return { text: x.text, entities, relations };
  });
  const s = await evaluate('conll04-shifted', shifted.map((x) => JSON.stringify(x)).join('\n'));
  t.match(s.body, { status: 'complete', relations: { tp: 0, precision: 0, recall: 0, f1: 0 } });
});
