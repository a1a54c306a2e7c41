// `npm run bench -- quality [--quick] [--json] [--tasks conll2003,wnut17,banking77,sst2] [--preset small]
//   [--minutes M] [--threads n] [--dev-limit n] [--word-features shape|shape,suffix:N|none]
//   [--dropout hidden,attention,word] [--label-isolation on|off] [--set key=value,...] [--init key=value,...]`
// Fresh-encoder quality in a fixed wall-clock budget (issue 17): for each task a fresh GLiNER2 encoder is
// initialized from the task's training text (loom init-encoder), trained with the service's default recipe
// for a fresh encoder (src/training/encoder/recipe.ts) and `max_minutes` set to the budget, and its best
// checkpoint is scored on the task's dev split in ../shared/data (strict span F1 for NER, accuracy for
// classification through the GLiNER2 classification head). Budgets: CoNLL-2003 and WNUT-17 20 min,
// Banking77 and SST-2 10 min. `--quick`: 2-minute budgets and 300 dev records drawn with a
// fixed seed (a smoke run, not the figures). `--set` overrides trainer settings of the recipe (values read as JSON
// where they parse, else as strings): `--set classification_loss=softmax,learning_rate=1e-3`; `--init` the preset's
// shape (`--preset tiny --init hidden_size=128,intermediate_size=256`: the tiny recipe on a wider model).
// spaCy's dev figures beside them, from issue 17: CoNLL-2003 (efficiency ner config, 20 min budget) and
// Banking77 (bag-of-words textcat, 527 s); SST-2 from bench/spacy_textcat.py on the 2-core EPYC (bag-of-words
// textcat, 10-minute budget, best dev epoch); WNUT-17 from bench/spacy_ner.py on the Zen 5 (default ner pipe, 20-minute
// budget on one thread beside a test run, best dev epoch).
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseJsonl, type DataRecord } from '../src/training/data/formats.ts';
import { ENCODER_PRESETS, initEncoder, InitRng } from '../src/training/encoder/init.ts';
import { shuffled } from '../src/training/common.ts';
import { parseWordFeatureSpec } from '../src/models/encoder/word-features.ts';
import { FRESH_LABEL_ISOLATION, freshRecipe, fullLabelRatio } from '../src/training/encoder/recipe.ts';
import { evaluateClassification, evaluateNer, trainEncoder } from '../src/training/index.ts';

interface Task {
  name: string;
  minutes: number;
  metric: 'f1' | 'accuracy';
  target: number;
  /** spaCy trained from scratch on the same split (dev), where measured */
  spacy: number | null;
}

const TASKS: Task[] = [
  { name: 'conll2003', minutes: 20, metric: 'f1', target: 0.9, spacy: 0.892 },
  { name: 'wnut17', minutes: 20, metric: 'f1', target: 0.35, spacy: 0.222 },
  { name: 'banking77', minutes: 10, metric: 'accuracy', target: 0.9, spacy: 0.871 },
  { name: 'sst2', minutes: 10, metric: 'accuracy', target: 0.85, spacy: 0.805 },
];

const DATA = join(import.meta.dirname, '../../shared/data');

export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean' },
      json: { type: 'boolean' },
      tasks: { type: 'string' },
      preset: { type: 'string', default: 'small' },
      minutes: { type: 'string' },
      threads: { type: 'string', default: '2' },
      'dev-limit': { type: 'string' },
      keep: { type: 'boolean' },
      'word-features': { type: 'string' },
      dropout: { type: 'string' },
      'label-isolation': { type: 'string' },
      set: { type: 'string' },
      init: { type: 'string' },
    },
  });
  const preset = ENCODER_PRESETS[values.preset!];
  if (!preset) throw new Error(`unknown preset ${values.preset}; one of ${Object.keys(ENCODER_PRESETS).join(', ')}`);
  const names = values.tasks ? values.tasks.split(',') : TASKS.map((t) => t.name);
  const devLimit = values['dev-limit'] ? Number(values['dev-limit']) : values.quick ? 300 : Infinity;
  const [hidden, attention, word] = (values.dropout ?? '').split(',').map((x) => (x ? Number(x) : undefined));
  const dropout = values.dropout ? { hidden_dropout: hidden, attention_dropout: attention, word_dropout: word } : {};
  const isoArg = values['label-isolation'];
  if (isoArg !== undefined && isoArg !== 'on' && isoArg !== 'off') throw new Error('--label-isolation takes on or off');
  const isolation = isoArg === undefined ? FRESH_LABEL_ISOLATION : isoArg === 'on';
  const overrides = parseSettings(values.set ?? '');
  const rows: Record<string, unknown>[] = [];
  for (const name of names) {
    const task = TASKS.find((t) => t.name === name);
    if (!task) throw new Error(`unknown task ${name}; one of ${TASKS.map((t) => t.name).join(', ')}`);
    const train = join(DATA, name, 'train.jsonl');
    const dev = join(DATA, name, 'dev.jsonl');
    if (!existsSync(train) || !existsSync(dev)) throw new Error(`${name}: ${train} / dev.jsonl not found`);
    const minutes = values.minutes ? Number(values.minutes) : values.quick ? 2 : task.minutes;
    const records = parseJsonl(readFileSync(train, 'utf8'));
    // a seeded sample when limited (the dev files are grouped by label: their first records are a few classes)
    const devRecs: DataRecord[] = shuffled(parseJsonl(readFileSync(dev, 'utf8')), new InitRng(17)).slice(0, devLimit);
    const work = mkdtempSync(join(tmpdir(), `loom-quality-${name}-`));
    const t0 = Date.now();
    initEncoder(
      join(work, 'base'),
      {
        ...preset,
        ...parseSettings(values.init ?? ''),
        label_isolation: isolation,
        ...(values['word-features'] === undefined
          ? {}
          : { word_features: parseWordFeatureSpec(values['word-features']) }),
      },
      records.map((r) => ('text' in r ? String(r.text) : '')),
      { seed: 42 },
    );
    const res = await trainEncoder(
      {
        base_model: join(work, 'base'),
        output_dir: join(work, 'run'),
        train_data: records,
        training_type: 'full',
        nr_epochs: 100,
        ...freshRecipe(values.preset!, task.metric === 'accuracy'),
        full_label_ratio: fullLabelRatio(isolation),
        ...dropout,
        max_minutes: minutes,
        seed: 42,
        threads: Number(values.threads),
        validation_data_percentage: 2,
        metric_samples: 300,
        ...overrides,
      },
      { onLog: (e) => values.json || console.error(`  [${name}] ${e.message}`) },
    );
    const trained = (Date.now() - t0) / 1000;
    const dir = res.best_checkpoint ?? res.final_checkpoint;
    const score =
      task.metric === 'f1'
        ? (await evaluateNer(dir, devRecs)).f1
        : (await evaluateClassification(dir, devRecs)).accuracy;
    const row = {
      task: name,
      budget_min: minutes,
      metric: task.metric,
      loom: score,
      spacy: task.spacy,
      target: task.target,
      steps: res.steps,
      stopped: res.stopped,
      train_s: trained,
      dev_records: devRecs.length,
      preset: values.preset,
      word_features: values['word-features'] ?? 'default',
      dropout: values.dropout ?? 'default',
      label_isolation: isolation,
      settings: values.set ?? '',
      init: values.init ?? '',
      threads: Number(values.threads),
    };
    rows.push(row);
    if (values.json) console.log(JSON.stringify(row));
    if (!values.keep) rmSync(work, { recursive: true, force: true });
  }
  if (values.json) return;
  const quick = values.quick ? ', --quick (2-minute budgets, 300 dev records)' : '';
  console.log(`\nfresh ${values.preset} encoder, ${values.threads} thread(s)${quick}`);
  console.log('| task | budget | metric | Loom | spaCy | target | steps | stopped |');
  console.log('|---|---|---|---|---|---|---|---|');
  const f = (x: unknown) => (typeof x === 'number' ? x.toFixed(3) : '-');
  for (const r of rows) {
    const scores = `${f(r.loom)} | ${f(r.spacy)} | ${f(r.target)}`;
    console.log(`| ${r.task} | ${r.budget_min} min | ${r.metric} | ${scores} | ${r.steps} | ${r.stopped} |`);
  }
}

/** `key=value,key=value` → an object; a value is JSON where it parses (numbers, booleans), else the string. */
function parseSettings(spec: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of spec.split(',').filter(Boolean)) {
    const at = kv.indexOf('=');
    if (at <= 0) throw new Error(`--set: "${kv}" is not key=value`);
    const raw = kv.slice(at + 1);
    let v: unknown = raw;
    try {
      v = JSON.parse(raw);
    } catch {
      // a plain string
    }
    out[kv.slice(0, at)] = v;
  }
  return out;
}
