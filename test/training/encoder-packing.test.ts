// GLiNER2 training graph: a micro-batch is packed (each sample runs its own tokens, not the batch's longest), so the
// padding a batch carries changes neither its losses nor its gradients, with or without dropout, and a batch's
// gradient is the sum of its samples' gradients. On a fresh model with word features and label isolation (the
// features and groups are packed along with the tokens).
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { buildWordPieceVocab, wordPieceTokenizerJson } from '../../src/training/encoder/wordpiece.ts';
import { initEncoderTensors, InitRng } from '../../src/training/encoder/init.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { EncoderTrainGraph, type EncoderBatch, type EncoderStepOptions } from '../../src/training/native.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';
import type { DebertaConfig } from '../../src/models/encoder/deberta.ts';
import { featureCols, featureRows, type WordFeatures } from '../../src/models/encoder/word-features.ts';

const texts = [
  'Tim Cook visited Apple Park in Cupertino yesterday with many of the engineers who built the new campus',
  'Angela Merkel met Emmanuel Macron in Paris', 'Great movie, loved it',
];
const dir = mkdtempSync(join(tmpdir(), 'loom-encpack-'));
writeFileSync(join(dir, 'tokenizer.json'),
  JSON.stringify(wordPieceTokenizerJson(buildWordPieceVocab(texts, { vocabSize: 200, minFrequency: 1 }))));
const tok = new EncoderTokenizer(join(dir, 'tokenizer.json'));
const V = tok.vocabSize();
const D = 16;
const cfg: DebertaConfig = {
  hiddenSize: D, numLayers: 2, numHeads: 2, intermediateSize: 32, vocabSize: V, positionBuckets: 8,
  maxRelativePositions: -1, maxPositionEmbeddings: 512, layerNormEps: 1e-7, posAttType: ['p2c', 'c2p'],
  hiddenAct: 'gelu',
};
const wf: WordFeatures = { shape: true, suffixBuckets: 16 };
const tensors = initEncoderTensors({
  hidden_size: D, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 32, vocab_size: V,
  position_buckets: 8, word_features: { shape: true, suffix_buckets: 16 },
}, V, 7);
const rng = new InitRng(3);  // larger weights than the init, so every path carries a gradient
for (const [n, v] of Object.entries(tensors))
  if (!n.includes('LayerNorm')) for (let i = 0; i < v.length; i++) v[i] += 0.1 * rng.normal();

const records: DataRecord[] = [
  { kind: 'ner', text: texts[0], entities: [{ start: 0, end: 8, label: 'person', text: 'Tim Cook' },
    { start: 17, end: 22, label: 'company', text: 'Apple' }] },
  { kind: 'ner', text: texts[1], entities: [{ start: 0, end: 13, label: 'person', text: 'Angela Merkel' }] },
  { kind: 'classification', text: texts[2], labels: ['positive'], multiLabel: false },
];
const exs = recordsToExamples(records, ['company', 'location', 'person'], ['negative', 'positive']);
const items = await Promise.all(exs.map((e) => featurize(tok, e, 8, undefined, wf, { isolation: true })));
const batch = collate(items);
const graph = () => EncoderTrainGraph.create(cfg, 8, true, tensors, null, {},
  { rows: featureRows(wf), cols: featureCols(wf) });
const names = graph().params().map((p) => p.name);

/** The same batch laid out with row stride N2 > N (more right padding). */
function repad(b: EncoderBatch, N2: number): EncoderBatch {
  const { B, N } = b;
  const row = (r: number) => Math.floor(r / N) * N2 + (r % N);
  const KF = b.feats ? b.feats.length / (B * N) : 0;
  const ids = new Int32Array(B * N2), mask = new Uint8Array(B * N2);
  const feats = b.feats ? new Int32Array(B * N2 * KF).fill(-1) : undefined;
  const groups = b.groups ? new Int32Array(B * N2) : undefined;
  for (let s = 0; s < B; s++) {
    ids.set(b.ids.subarray(s * N, (s + 1) * N), s * N2);
    mask.set(b.mask.subarray(s * N, (s + 1) * N), s * N2);
    feats?.set(b.feats!.subarray(s * N * KF, (s + 1) * N * KF), s * N2 * KF);
    groups?.set(b.groups!.subarray(s * N, (s + 1) * N), s * N2);
  }
  return {
    ...b, N: N2, ids, mask, feats, groups, wordRows: b.wordRows.map(row), wordEnd: b.wordEnd?.map((r) => row(r - 1) + 1),
    segRows: b.segRows.map(row),
  };
}

async function run(g: EncoderTrainGraph, bs: EncoderBatch[], o: EncoderStepOptions = {}) {
  g.zeroGrad();
  let loss = 0;
  for (const b of bs) loss += (await g.step(b, { dropNeg: false, ...o })).loss;
  return { loss, grads: names.map((n) => g.grad(n)) };
}

t.test('padding changes neither the losses nor the gradients, bit for bit', async (t) => {
  t.ok(batch.B === 3 && new Set(items.map((it) => it.f.ids.length)).size === 3, 'three samples of three lengths');
  t.ok(batch.groups && batch.feats, 'label-isolation groups and word features in the batch');
  const g = graph();
  for (const o of [{}, { hiddenDropout: 0.1, attentionDropout: 0.1, seed: 5 }] as EncoderStepOptions[]) {
    const a = await run(g, [batch], o);
    const b = await run(g, [repad(batch, batch.N + 13)], o);
    const what = o.seed ? 'with dropout (the same masks)' : 'without dropout';
    t.equal(b.loss, a.loss, `${what}: the loss`);
    t.ok(a.grads.every((x, i) => x.some((v) => v !== 0) && x.every((v, j) => v === b.grads[i][j])),
      `${what}: every gradient`);
  }
});

t.test("a batch's gradient is the sum of its samples' gradients", async (t) => {
  const g = graph();
  const whole = await run(g, [batch]);
  const alone = await run(g, items.map((it) => collate([it])));
  t.ok(Math.abs(whole.loss - alone.loss) <= 1e-6 * whole.loss, `loss ${whole.loss} vs ${alone.loss} summed`);
  let worst = 0, wname = '';
  names.forEach((n, i) => {
    let d = 0, m = 0;
    whole.grads[i].forEach((v, j) => ((d = Math.max(d, Math.abs(v - alone.grads[i][j]))), (m = Math.max(m, Math.abs(v)))));
    if (d / (m + 1e-12) > worst) (worst = d / (m + 1e-12)), (wname = n);
  });
  t.ok(worst <= 1e-4, `worst difference ${worst.toExponential(2)} of the largest |dW| (${wname})`);
});
