// `npm run bench -- ner-errors <model dir> [--task conll2003] [--dev-limit N] [--threshold 0.5] [--json]`
// Where a trained NER model's dev errors are (issue 17): recall of the dev entities whose text and label occur in the
// task's training split ("seen"), against those that do not ("unseen"), recall per label, and what each miss and
// false positive is (the right span under another label, an overlapping span, nothing there), and recall by how the
// mention is written (no capitals, all capitals, or mixed: WNUT-17's tweets write many names in lower case and
// CoNLL-2003's headlines in capitals, which the word-shape feature sees). A model trained on
// `npm run bench -- quality --keep`'s run dir (`<work>/run/best`) is the usual input.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseJsonl, type DataRecord } from '../src/training/data/formats.ts';
import { entityLabels } from '../src/training/encoder/examples.ts';
import { loadEncoder } from '../src/models/encoder/index.ts';

const DATA = join(import.meta.dirname, '../../shared/data');

type Span = { start: number; end: number; label: string };
type Ner = Extract<DataRecord, { kind: 'ner' }>;

/** How a mention is written: without capitals, in capitals only (letters), or mixed (a capital among lower case). */
function casing(s: string): 'lower case' | 'all caps' | 'mixed case' {
  if (s === s.toLowerCase()) return 'lower case';
  return s === s.toUpperCase() ? 'all caps' : 'mixed case';
}

export async function run(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      task: { type: 'string', default: 'conll2003' },
      'dev-limit': { type: 'string' },
      threshold: { type: 'string', default: '0.5' },
      json: { type: 'boolean' },
    },
  });
  const dir = positionals[0];
  if (!dir) throw new Error('usage: npm run bench -- ner-errors <model dir> [--task conll2003] [--dev-limit N]');
  const read = (split: string) =>
    parseJsonl(readFileSync(join(DATA, values.task!, `${split}.jsonl`), 'utf8')).filter(
      (r): r is Ner => r.kind === 'ner',
    );
  const train = read('train');
  const dev = read('dev').slice(0, values['dev-limit'] ? Number(values['dev-limit']) : Infinity);
  const seen = new Set(train.flatMap((r) => r.entities.map((e) => `${e.label}\u0000${r.text.slice(e.start, e.end)}`)));
  const labels = entityLabels(train);
  const model = await loadEncoder(dir);
  const recall = new Map<string, [number, number]>(); // group → [gold, found]
  const count = (k: string, hit: boolean) => {
    const c = recall.get(k) ?? [0, 0];
    c[0]++;
    if (hit) c[1]++;
    recall.set(k, c);
  };
  const misses = { wrong_label: 0, boundary: 0, nothing: 0 };
  const fps = { wrong_label: 0, boundary: 0, spurious: 0 };
  let tp = 0;
  const same = (a: Span, b: Span) => a.start === b.start && a.end === b.end;
  const overlaps = (a: Span, b: Span) => a.start < b.end && b.start < a.end;
  for (let i = 0; i < dev.length; i += 32) {
    const recs = dev.slice(i, i + 32);
    const res = await model.extract(recs.map((r) => r.text), labels, {
      threshold: Number(values.threshold), batchSize: 32,
    });
    recs.forEach((r, j) => {
      const pred: Span[] = [];
      for (const [label, v] of Object.entries(res[j]?.entities ?? {}))
        for (const e of Array.isArray(v) ? v : v ? [v] : [])
          if (e.start !== undefined && e.end !== undefined) pred.push({ start: e.start, end: e.end, label });
      for (const g of r.entities) {
        const hit = pred.some((p) => same(p, g) && p.label === g.label);
        count(seen.has(`${g.label}\u0000${r.text.slice(g.start, g.end)}`) ? 'seen in train' : 'unseen', hit);
        count(`label ${g.label}`, hit);
        count(`written ${casing(r.text.slice(g.start, g.end))}`, hit);
        count('all', hit);
        if (hit) continue;
        if (pred.some((p) => same(p, g))) misses.wrong_label++;
        else if (pred.some((p) => overlaps(p, g))) misses.boundary++;
        else misses.nothing++;
      }
      for (const p of pred) {
        if (r.entities.some((g) => same(p, g) && p.label === g.label)) tp++;
        else if (r.entities.some((g) => same(p, g))) fps.wrong_label++;
        else if (r.entities.some((g) => overlaps(p, g))) fps.boundary++;
        else fps.spurious++;
      }
    });
  }
  const order = (g: string) => (g === 'all' ? 0 : g.startsWith('label') ? 2 : g.startsWith('written') ? 3 : 1);
  const rows = [...recall]
    .map(([group, [gold, found]]) => ({ group, gold, recall: found / gold }))
    .sort((a, b) => order(a.group) - order(b.group) || a.group.localeCompare(b.group));
  if (values.json) {
    console.log(JSON.stringify({ task: values.task, dev_records: dev.length, recall: rows, misses, tp, fps }));
    return;
  }
  console.log(`${values.task}, ${dev.length} dev records, ${dir}`);
  console.log('| entities | gold | recall |\n|---|---|---|');
  for (const r of rows) console.log(`| ${r.group} | ${r.gold} | ${r.recall.toFixed(3)} |`);
  console.log(`misses: right span under another label ${misses.wrong_label}, overlapping span ${misses.boundary}, `
    + `nothing there ${misses.nothing}`);
  console.log(`predictions: ${tp} right; false: another label ${fps.wrong_label}, overlapping ${fps.boundary}, `
    + `spurious ${fps.spurious}`);
}
