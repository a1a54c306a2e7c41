// Issue 17: what label bags cost served. Two fresh encoders of one preset and seed, one with label bags (each label a
// single [L] token) and one without (the marker and the name's pieces), classify the same Banking77 dev texts with
// all 77 intents, alternately; prints texts per second and prompt tokens per text. The weights are untrained: the
// cost of a forward does not depend on them.
//   npx tsx bench/cls-head/served-labels.mts [--preset small|tiny] [--texts 96] [--reps 3] [--threads 2]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Gliner2Model } from '../../src/models/encoder/gliner2.ts';
import { normalizeSchema } from '../../src/models/encoder/schema.ts';
import { setThreads } from '../../src/native/cpu.ts';
import { parseJsonl } from '../../src/training/data/formats.ts';
import { ENCODER_PRESETS, initEncoder } from '../../src/training/encoder/init.ts';
import { CLASSIFICATION_TASK } from '../../src/training/encoder/recipe.ts';

const { values } = parseArgs({
  options: {
    preset: { type: 'string', default: 'small' }, texts: { type: 'string', default: '96' },
    reps: { type: 'string', default: '3' }, threads: { type: 'string', default: '2' },
  },
});
setThreads(Number(values.threads));
const DATA = join(import.meta.dirname, '../../../shared/data/banking77');
const rows = (split: string) => parseJsonl(readFileSync(join(DATA, `${split}.jsonl`), 'utf8'))
  .filter((r) => r.kind === 'classification') as { text: string; labels: string[] }[];
const train = rows('train');
const labels = [...new Set(train.map((r) => r.labels[0]!))].sort();
const texts = rows('dev').slice(0, Number(values.texts)).map((r) => r.text);
const schema = { classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: false }] };
const preset = ENCODER_PRESETS[values.preset!];
if (!preset) throw new Error(`--preset: one of ${Object.keys(ENCODER_PRESETS).join(', ')}`);
const tmp = mkdtempSync(join(tmpdir(), 'loom-served-labels-'));
try {
  const models: [string, Gliner2Model][] = [];
  for (const bag of [false, true]) {
    const dir = join(tmp, bag ? 'bag' : 'plain');
    initEncoder(dir, { ...preset, label_bag: bag }, train.map((r) => r.text), { seed: 42 });
    models.push([bag ? 'label bags' : 'marker + name pieces', await Gliner2Model.load(dir)]);
  }
  for (const [name, m] of models) {
    const f = await m.format(texts[0]!, normalizeSchema(schema));
    console.log(`${name}: ${f.ids.length} tokens for the first text (${f.wordPos.length} words) with ${labels.length} labels`);
  }
  const best = new Map<string, number>();
  for (let rep = 0; rep < Number(values.reps); rep++)
    for (const [name, m] of models) {
      const t0 = performance.now();
      for (let i = 0; i < texts.length; i += 32) await m.extract(texts.slice(i, i + 32), schema);
      const s = (performance.now() - t0) / 1000;
      best.set(name, Math.max(best.get(name) ?? 0, texts.length / s));
      console.log(`rep ${rep} ${name}: ${(texts.length / s).toFixed(1)} texts/s`);
    }
  const [a, b] = [...best.values()];
  console.log(`best: ${[...best].map(([n, v]) => `${n} ${v.toFixed(1)}`).join(', ')} texts/s; ${(b! / a!).toFixed(2)}×`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
