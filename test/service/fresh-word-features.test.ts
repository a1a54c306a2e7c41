// Word features of fresh encoders (issue 17), end to end: a fresh model written by initEncoder with the
// default word features is served from a models folder through POST /inference, and its answers are
// what the training graph computes on the same checkpoint (the classification loss from the served
// label confidences equals the graph's), for a capitalised text and its lower-cased copy, which the
// feature tells apart (GLiNER2 lower-cases words before tokenization; without the feature both are one input).
// The table starts at zero (a fresh model computes what it would without it); the test gives it values, as
// training does.
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initEncoder, InitRng } from '../../src/training/encoder/init.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import {
  SafetensorsCheckpoint, toFloat32, writeSafetensors, type TensorToWrite,
} from '../../src/formats/safetensors.ts';
import { parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { featureCols, featureRows, parseWordFeatures } from '../../src/models/encoder/word-features.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';

const TEXTS = [
  'Tim Cook visited Apple Park in Cupertino on Monday',
  'the new phone is great and I loved it',
  'NASA and the UN met in Geneva',
];
const root = mkdtempSync(join(tmpdir(), 'loom-wordfeat-'));
const modelsDir = join(root, 'models');
const dir = join(modelsDir, 'fresh-tiny');
mkdirSync(modelsDir);
const TINY = { hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 64, vocab_size: 400 };
// isolation: label-isolation.test.ts; label bags (the fresh default) served over HTTP against the training graph here
initEncoder(dir, { ...TINY, label_isolation: false }, TEXTS, { seed: 3 });
const TABLE = 'encoder.embeddings.word_feature_embeddings.weight';
const init = SafetensorsCheckpoint.open(dir);
const zero = toFloat32(init.get(TABLE)).every((x) => x === 0);
const written: Record<string, TensorToWrite> = {};
const rng = new InitRng(5);
for (const n of init.names()) {
  const data = toFloat32(init.get(n)).slice();
  if (n === TABLE) for (let i = 0; i < data.length; i++) data[i] = 0.05 * rng.normal();
  written[n] = { dtype: 'F32', shape: init.get(n).shape, data };
}
writeSafetensors(join(dir, 'model.safetensors'), written, { format: 'pt' });
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }), config: { modelsDir } });
t.teardown(async () => {
  await ts.close();
  rmSync(root, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 1000 });

const g2 = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
const wf = parseWordFeatures(g2.word_features)!;
const enc = parseDebertaConfig(JSON.parse(readFileSync(join(dir, 'encoder_config', 'config.json'), 'utf8')));
const ckpt = SafetensorsCheckpoint.open(dir);
const tensors: Record<string, Float32Array> = {};
for (const n of ckpt.names()) tensors[n] = toFloat32(ckpt.get(n));
const feats = { rows: featureRows(wf), cols: featureCols(wf) };
const graph = EncoderTrainGraph.create(enc, 8, true, tensors, null, {}, feats);
const tok = new EncoderTokenizer(join(dir, 'tokenizer.json'));
const LABELS = ['negative', 'positive'];

t.test('init-encoder writes the shape feature by default (config field + tensor)', async (t) => {
  t.same(g2.word_features, { shape: true, suffix_buckets: 0 });
  t.same(ckpt.get(TABLE).shape, [8, 32], '8 shape rows');
  t.ok(zero, 'the table starts at zero');
});

t.test('POST /inference answers what the training graph computes, and sees capital letters', async (t) => {
  const served: number[] = [];
  for (const text of [TEXTS[2], TEXTS[2].toLowerCase()]) {
    const schema = { classifications: [{ task: 'label', labels: LABELS, multi_label: true, cls_threshold: 0 }] };
    const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'fresh-tiny', text, schema } });
    t.equal(r.status, 200, r.text.slice(0, 300));
    const out = r.body.result.classifications.label as { label: string; confidence: number }[];
    const conf = (l: string) => out.find((x) => x.label === l)!.confidence;
    const servedLoss = -Math.log(conf('positive')) - Math.log(1 - conf('negative'));
    const rec = { kind: 'classification' as const, text, labels: ['positive'], multiLabel: false };
    const [ex] = recordsToExamples([rec], [], LABELS);
    t.same(ex.schema.classifications[0].labels, LABELS, 'the same prompt as served');
    t.equal(g2.label_bag, true, 'a label is one bagged [L] token (the fresh default)');
    const batch = collate([await featurize(tok, ex, 8, undefined, wf, { bag: true })]);
    t.ok(batch.bags, 'the batch carries the bags');
    const g = await graph.step(batch, { backward: false, dropNeg: false });
    // float32 forwards in both (the served one packs the sequence, the graph keeps the batch layout)
    t.ok(Math.abs(g.cls - servedLoss) <= 1e-6 * Math.max(1, g.cls), `graph ${g.cls} vs served ${servedLoss}`);
    served.push(servedLoss);
  }
  // ten times the tolerance above: a path that dropped the feature would fail one of the two checks
  const what = `capitalised and lower-cased texts differ (loss ${served[0]} vs ${served[1]})`;
  t.ok(Math.abs(served[0] - served[1]) > 1e-5, what);
});
