// Issue 17 diagnostic, step 1: a fresh GLiNER2 encoder (the service's init) and a classification task's texts as
// sub-word ids, for bench/cls-head/lab.py.
//   npx tsx bench/cls-head/dump.mts banking77 tiny /tmp/clshead
// Writes <out>/base (the fresh checkpoint, loom init-encoder) and <out>/data.json: the label pieces, the prompt's fixed
// pieces, the text pieces + word-feature rows and label of every train / dev record, and one record's full formatted
// ids (the lab checks that it builds Loom's prompt exactly).
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseJsonl, type DataRecord } from '../../src/training/data/formats.ts';
import { ENCODER_PRESETS, initEncoder } from '../../src/training/encoder/init.ts';
import { CLASSIFICATION_TASK } from '../../src/training/encoder/recipe.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { formatInput } from '../../src/models/encoder/format.ts';
import { normalizeSchema } from '../../src/models/encoder/schema.ts';
import { DEFAULT_WORD_FEATURES } from '../../src/models/encoder/word-features.ts';

const [task = 'banking77', preset = 'tiny', out = '/tmp/clshead'] = process.argv.slice(2);
const DATA = join(import.meta.dirname, '../../../shared/data', task);
type Cls = Extract<DataRecord, { kind: 'classification' }>;
const load = (split: string) => parseJsonl(readFileSync(join(DATA, `${split}.jsonl`), 'utf8'))
  .filter((r): r is Cls => r.kind === 'classification');
const train = load('train');
const dev = load('dev');
const labels = [...new Set(train.map((r) => r.labels[0]))].sort();
mkdirSync(out, { recursive: true });
initEncoder(join(out, 'base'), { ...ENCODER_PRESETS[preset] }, train.map((r) => r.text), { seed: 42 });
const tok = new EncoderTokenizer(join(out, 'base', 'tokenizer.json'));
const schema = normalizeSchema({ classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: false }] });
const sepPieces = async (tokens: string[]) => (await tok.pieces(tokens)).flatMap((p) => [...p]);
const encode = async (r: Cls) => {
  const f = await formatInput(tok, r.text, schema, { maxWords: 256, wordFeatures: DEFAULT_WORD_FEATURES });
  const textStart = (await sepPieces(f.processorTokens.slice(0, f.processorTokens.indexOf('[SEP_TEXT]') + 1))).length;
  return { ids: [...f.ids.slice(textStart)], feats: [...f.feats!.slice(textStart)], y: labels.indexOf(r.labels[0]),
    full: [...f.ids] };
};
const tr = [];
for (const r of train) tr.push(await encode(r));
const dv = [];
for (const r of dev) dv.push(await encode(r));
writeFileSync(join(out, 'data.json'), JSON.stringify({
  labels,
  label_pieces: (await tok.pieces(labels)).map((x) => [...x]),
  head: await sepPieces(['(', '[P]', CLASSIFICATION_TASK, '(']),
  L: await sepPieces(['[L]']),
  tail: await sepPieces([')', ')', '[SEP_TEXT]']),
  check: tr[0].full,
  train: tr.map(({ ids, feats, y }) => ({ ids, feats, y })),
  dev: dv.map(({ ids, feats, y }) => ({ ids, feats, y })),
}));
console.log(`${out}: ${tr.length} train, ${dv.length} dev, ${labels.length} labels`);
