// Label isolation of fresh GLiNER2 encoders (issue 17, src/models/encoder/label-isolation.ts): token groups (0 shared,
// g >= 1 the g-th classification label), attention masked by group and relative positions that count group 0 alone.
// 1. The native DeBERTa forward with groups against a plain float64 reference (every ISA: portable, AVX2, AVX-512),
//    single samples and a right-padded batch; without groups it is the reference's full attention.
// 2. A fresh isolated model gives every label the same logit whether asked with all labels or a subset, in any order.
// 3. The prompt builder's groups; init writes the flag, the recipe samples labels for an isolated base.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { DebertaEncoder, parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { Gliner2Model } from '../../src/models/encoder/gliner2.ts';
import { normalizeSchema } from '../../src/models/encoder/schema.ts';
import { forEachIsa } from '../../src/native/cpu.ts';
import { initEncoder } from '../../src/training/encoder/init.ts';
import { CLASSIFICATION_TASK, freshRecipe, fullLabelRatio } from '../../src/training/encoder/recipe.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { featureCols, featureRows } from '../../src/models/encoder/word-features.ts';
import type { LabelPrompt } from '../../src/models/encoder/label-isolation.ts';

const gold = join(import.meta.dirname, '../../../shared/goldens/deberta-v2-tiny');
const ckpt = SafetensorsCheckpoint.open(gold);
const config = parseDebertaConfig(JSON.parse(readFileSync(join(gold, 'config.json'), 'utf8')));
const D = config.hiddenSize;
const W: Record<string, Float32Array> = {};
for (const n of ckpt.names()) W[n] = toFloat32(ckpt.get(n));

function erf(x: number): number {  // Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)
  const s = Math.sign(x);
  const a = Math.abs(x);
  const k = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * k - 1.453152027) * k + 1.421413741) * k - 0.284496736) * k + 0.254829592) * k *
    Math.exp(-a * a);
  return s * y;
}
// y (n, o) = x (n, i) · W (o, i)ᵀ + b
function linear(x: Float64Array, n: number, w: Float32Array, b: Float32Array, o: number): Float64Array {
  const i = w.length / o;
  const y = new Float64Array(n * o);
  for (let r = 0; r < n; r++)
    for (let c = 0; c < o; c++) {
      let s = b[c];
      for (let e = 0; e < i; e++) s += x[r * i + e] * w[c * i + e];
      y[r * o + c] = s;
    }
  return y;
}
function layerNorm(x: Float64Array, n: number, w: Float32Array, b: Float32Array): Float64Array {
  const y = new Float64Array(n * D);
  for (let r = 0; r < n; r++) {
    let m = 0;
    for (let e = 0; e < D; e++) m += x[r * D + e] / D;
    let v = 0;
    for (let e = 0; e < D; e++) v += (x[r * D + e] - m) ** 2 / D;
    for (let e = 0; e < D; e++) y[r * D + e] = ((x[r * D + e] - m) / Math.sqrt(v + 1e-7)) * w[e] + b[e];
  }
  return y;
}

/** Positions of the isolation rule, written out plainly: group 0 numbered in order, then each label after them. */
function positions(groups: number[]): number[] {
  const n0 = groups.filter((g) => g === 0).length;
  const next = new Map<number, number>();
  let p0 = 0;
  return groups.map((g) => {
    if (g === 0) return p0++;
    const p = next.get(g) ?? n0;
    next.set(g, p + 1);
    return p;
  });
}

/** The DeBERTa forward in float64, one sample, with groups (null: every token sees every token, positions = index)
 * and label bags (bags[r]: word-table rows whose mean row r's embedding adds). */
function reference(enc: DebertaEncoder, ids: number[], groups: number[] | null, bags?: number[][]): Float64Array {
  const n = ids.length;
  const H = config.numHeads;
  const d = D / H;
  const span = config.positionBuckets;
  const pos = groups ? positions(groups) : ids.map((_, i) => i);
  const emb = new Float64Array(n * D);
  ids.forEach((id, r) => emb.set(W['embeddings.word_embeddings.weight'].subarray(id * D, (id + 1) * D), r * D));
  bags?.forEach((bag, r) => {
    for (const id of bag)
      for (let e = 0; e < D; e++) emb[r * D + e] += W['embeddings.word_embeddings.weight'][id * D + e] / bag.length;
  });
  let x = layerNorm(emb, n, W['embeddings.LayerNorm.weight'], W['embeddings.LayerNorm.bias']);
  const R = layerNorm(Float64Array.from(W['encoder.rel_embeddings.weight'].subarray(0, 2 * span * D)), 2 * span,
    W['encoder.LayerNorm.weight'], W['encoder.LayerNorm.bias']);
  const delta = new Map<number, number>();
  const dl = (rel: number) => delta.get(rel) ?? (delta.set(rel, enc.relIndex(rel)), delta.get(rel)!);
  for (let l = 0; l < config.numLayers; l++) {
    const p = `encoder.layer.${l}.`;
    const lin = (v: Float64Array, rows: number, m: string, o = D) =>
      linear(v, rows, W[p + m + '.weight'], W[p + m + '.bias'], o);
    const q = lin(x, n, 'attention.self.query_proj');
    const k = lin(x, n, 'attention.self.key_proj');
    const v = lin(x, n, 'attention.self.value_proj');
    const PQ = lin(R, 2 * span, 'attention.self.query_proj');
    const PK = lin(R, 2 * span, 'attention.self.key_proj');
    const ctx = new Float64Array(n * D);
    const dot = (a: Float64Array, ai: number, b: Float64Array, bi: number, h: number) => {
      let s = 0;
      for (let e = 0; e < d; e++) s += a[ai * D + h * d + e] * b[bi * D + h * d + e];
      return s;
    };
    for (let h = 0; h < H; h++)
      for (let i = 0; i < n; i++) {
        const s = new Float64Array(n).fill(-Infinity);
        for (let j = 0; j < n; j++) {
          if (groups && groups[j] !== 0 && groups[j] !== groups[i]) continue;
          const r = dl(pos[i] - pos[j]);
          s[j] = (dot(q, i, k, j, h) + dot(q, i, PK, r, h) + dot(k, j, PQ, r, h)) / Math.sqrt(3 * d);
        }
        const m = Math.max(...s);
        let z = 0;
        for (let j = 0; j < n; j++) z += s[j] = Math.exp(s[j] - m);
        for (let j = 0; j < n; j++)
          for (let e = 0; e < d; e++) ctx[i * D + h * d + e] += (s[j] / z) * v[j * D + h * d + e];
      }
    const ao = lin(ctx, n, 'attention.output.dense');
    for (let e = 0; e < n * D; e++) ao[e] += x[e];
    const a = layerNorm(ao, n, W[p + 'attention.output.LayerNorm.weight'], W[p + 'attention.output.LayerNorm.bias']);
    const hh = lin(a, n, 'intermediate.dense', config.intermediateSize).map((u) => 0.5 * u * (1 + erf(u / Math.SQRT2)));
    const f = lin(hh, n, 'output.dense');
    for (let e = 0; e < n * D; e++) f[e] += a[e];
    x = layerNorm(f, n, W[p + 'output.LayerNorm.weight'], W[p + 'output.LayerNorm.bias']);
  }
  return x;
}

function maxDiff(a: Float32Array, b: Float64Array): number {
  let m = 0;
  for (let i = 0; i < b.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}
const seq = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 4 + ((i * 7919 + seed * 104729) % 990));
// a prompt-like layout: shared tokens, three labels (2, 3 and 1 pieces), shared, a fourth label, then the text
const G1 = [0, 0, 0, 0, 1, 1, 2, 2, 2, 3, 0, 0, 0, 0, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
// a longer one (43 labels of 2 pieces between the shared tokens: more than one 16-row tile of every kind)
const G2 = [0, 0, 0, ...Array.from({ length: 86 }, (_, i) => 1 + (i >> 1)), 0, 0, ...Array(20).fill(0)];
// 48 tokens (a whole number of 16-lane rows) ending in a label: the kernels' buffers filled to their last row
const G3 = [...G1, ...Array(10).fill(0), 5, 5, 5];

t.test('attention with groups: the native forward against a float64 reference, every ISA', async (t) => {
  const enc = await DebertaEncoder.load(ckpt, config);
  const ids1 = seq(G1.length, 1);
  const ids2 = seq(G2.length, 2);
  const ref1 = reference(enc, ids1, G1);
  const ref2 = reference(enc, ids2, G2);
  const ids3 = seq(G3.length, 3);
  const ref3 = reference(enc, ids3, G3);
  const plain1 = reference(enc, ids1, null);
  await forEachIsa(async (isa) => {
    const one = (ids: number[], g?: number[]) =>
      enc.forward(Int32Array.from(ids), new Uint8Array(ids.length).fill(1), 1, ids.length, undefined,
        g && Int32Array.from(g));
    const full = await one(ids1);
    t.ok(maxDiff(full, plain1) < 1e-4, `${isa}: without groups, full attention`);
    t.ok(maxDiff(full, ref1) > 1e-2, `${isa}: which the groups change`);
    const d1 = maxDiff(await one(ids1, G1), ref1);
    t.ok(d1 < 1e-4, `${isa}: 4 labels, max abs diff ${d1.toExponential(2)}`);
    const d2 = maxDiff(await one(ids2, G2), ref2);
    t.ok(d2 < 1e-4, `${isa}: 43 labels, max abs diff ${d2.toExponential(2)}`);
    const d3 = maxDiff(await one(ids3, G3), ref3);
    t.ok(d3 < 1e-4, `${isa}: 48 tokens ending in a label, max abs diff ${d3.toExponential(2)}`);
    // a right-padded batch of both (the packed path) and a left-padded one (keys masked inside the kernel)
    const N = G2.length + 3;
    const ids = new Int32Array(2 * N);
    const mask = new Uint8Array(2 * N);
    const groups = new Int32Array(2 * N);
    ids.set(ids1, 0), mask.fill(1, 0, G1.length), groups.set(G1, 0);
    ids.set(ids2, N), mask.fill(1, N, N + G2.length), groups.set(G2, N);
    const out = await enc.forward(ids, mask, 2, N, undefined, groups);
    t.ok(maxDiff(out.subarray(0, G1.length * D), ref1) < 1e-4, `${isa}: batch, sample 0`);
    t.ok(maxDiff(out.subarray(N * D, (N + G2.length) * D), ref2) < 1e-4, `${isa}: batch, sample 1`);
    const off = N - G1.length;
    const idsL = new Int32Array(N);
    const maskL = new Uint8Array(N);
    const groupsL = new Int32Array(N);
    idsL.set(ids1, off), maskL.fill(1, off), groupsL.set(G1, off);
    const left = await enc.forward(idsL, maskL, 1, N, undefined, groupsL);
    t.ok(maxDiff(left.subarray(off * D), ref1) < 1e-4, `${isa}: left padding (masked keys)`);
    await t.rejects(enc.forward(Int32Array.from(ids1), new Uint8Array(ids1.length).fill(1), 1, ids1.length, undefined,
      Int32Array.from(G1, (g) => (g ? -g : 0))), /group/, `${isa}: a negative group is refused`);
    await t.rejects(enc.forward(Int32Array.from(ids1), new Uint8Array(ids1.length).fill(1), 1, ids1.length, undefined,
      Int32Array.from(G1, (g) => (g ? g + ids1.length : 0))), /group/, `${isa}: a group past the token count too`);
  });
});

t.test('label bags: the native forward against a float64 reference, every ISA, batched', async (t) => {
  const enc = await DebertaEncoder.load(ckpt, config);
  // shared tokens, four one-token labels (bags of 2, 3, 1 and 4 pieces), shared, then the text
  const groups = [0, 0, 0, 0, 1, 2, 3, 0, 0, 4, ...Array(14).fill(0)];
  const bags = [[], [], [], [], [11, 12], [13, 14, 15], [16], [], [], [17, 18, 19, 20], ...Array(14).fill([])];
  const ids = seq(groups.length, 5);
  const ref = reference(enc, ids, groups, bags);
  const cols = 4;
  const flat = (bs: number[][], n: number, c: number) => {
    const out = new Int32Array(n * c).fill(-1);
    bs.forEach((b, r) => out.set(b, r * c));
    return out;
  };
  const one = Int32Array.from(ids);
  const all = new Uint8Array(ids.length).fill(1);
  await forEachIsa(async (isa) => {
    const out = await enc.forward(one, all, 1, ids.length, undefined, Int32Array.from(groups),
      flat(bags, ids.length, cols));
    const d = maxDiff(out, ref);
    t.ok(d < 1e-4, `${isa}: max abs diff ${d.toExponential(2)}`);
    const plain = await enc.forward(one, all, 1, ids.length, undefined, Int32Array.from(groups));
    t.ok(maxDiff(plain, ref) > 1e-2, `${isa}: which the bags change`);
    // wider bag rows (-1 padding) and a second, shorter sample in a right-padded batch
    const N = ids.length + 2;
    const bi = new Int32Array(2 * N), bm = new Uint8Array(2 * N), bg = new Int32Array(2 * N);
    const bb = new Int32Array(2 * N * 6).fill(-1);
    bi.set(one, 0), bm.fill(1, 0, ids.length), bg.set(groups, 0), bb.set(flat(bags, ids.length, 6), 0);
    bi.set(one.subarray(0, 8), N), bm.fill(1, N, N + 8), bg.set(groups.slice(0, 8), N);
    bb.set(flat(bags.slice(0, 8), 8, 6), N * 6);
    const batch = await enc.forward(bi, bm, 2, N, undefined, bg, bb);
    t.ok(maxDiff(batch.subarray(0, ids.length * D), ref) < 1e-4, `${isa}: in a batch, 6 columns`);
    const ref2 = reference(enc, ids.slice(0, 8), groups.slice(0, 8), bags.slice(0, 8));
    t.ok(maxDiff(batch.subarray(N * D, (N + 8) * D), ref2) < 1e-4, `${isa}: the second sample`);
  });
  const withBags = (bags: Int32Array) => async () => enc.forward(one, all, 1, ids.length, undefined, undefined, bags);
  await t.rejects(withBags(new Int32Array(ids.length * 2).fill(config.vocabSize)), /label bag id/,
    'an id past the table is refused');
  await t.rejects(withBags(new Int32Array(ids.length * 2 + 1)), /bags must hold/,
    'a length that is not B*N*cols is refused');
});

const LABELS = ['activate my card', 'age limit', 'apple pay', 'atm support', 'card arrival', 'cash withdrawal',
  'exchange rate', 'lost or stolen card', 'pin blocked', 'top up failed', 'transfer not received', 'wrong amount'];
const TEXTS = ['I am still waiting on my card?', 'How old do I need to be?', 'Can I top up with apple pay?'];
const cfg = { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 600 };
const tmp = mkdtempSync(join(tmpdir(), 'loom-iso-'));

/** Each label's logit when `m` is asked about `text` with `labels` (and an entity segment beside, if given). */
async function logitsOf(m: Gliner2Model, text: string, labels: string[], entities?: string[]) {
  const s = normalizeSchema({
    ...(entities ? { entities } : {}),
    classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: false }],
  });
  const { inter } = await m.debugRun(text, s);
  const cls = inter.segments[inter.segments.length - 1].cls!;
  return new Map(labels.map((l, i) => [l, cls[i]]));
}

/** The largest relative difference of a label's logit between `all` and each of `others`. */
function worstAcross(all: Map<string, number>, others: Map<string, number>[]): number {
  let worst = 0;
  for (const other of others)
    for (const [l, z] of other) worst = Math.max(worst, Math.abs(z - all.get(l)!) / Math.max(1, Math.abs(z)));
  return worst;
}

t.test('a fresh isolated model: the same logit per label with every label, a subset, any order', async (t) => {
  const dir = join(tmp, 'iso'); // the marker and the name's pieces (label bags: the last test)
  initEncoder(dir, { ...cfg, label_bag: false }, [...TEXTS, ...LABELS], { seed: 3 });
  t.equal(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).label_isolation, true, 'init writes the flag');
  const m = await Gliner2Model.load(dir);
  t.ok(m.labelIsolation, 'the model reads it');
  const logits = (text: string, labels: string[], entities?: string[]) => logitsOf(m, text, labels, entities);
  const rev = LABELS.slice().reverse();
  const sub = [LABELS[7], LABELS[2], LABELS[10]];
  let worst = 0;
  let spread = 0;
  for (const text of TEXTS) {
    const all = await logits(text, LABELS);
    const vals = [...all.values()];
    spread = Math.max(spread, Math.max(...vals) - Math.min(...vals));
    const others = [await logits(text, rev), await logits(text, sub), await logits(text, [LABELS[4]])];
    // an entity segment beside the classification: shared tokens change, so only the equality across label sets holds
    const withEnt = await logits(text, LABELS, ['person']);
    worst = Math.max(worst, worstAcross(all, others), worstAcross(withEnt, [await logits(text, sub, ['person'])]));
  }
  t.ok(worst < 1e-5, `largest relative difference ${worst.toExponential(2)} (f32 summation order)`);
  t.ok(spread > 1e-3, `the labels still differ from each other (spread ${spread.toExponential(2)})`);

  // without the flag the same weights depend on the other labels
  const plainDir = join(tmp, 'plain');
  initEncoder(plainDir, { ...cfg, label_isolation: false, label_bag: false }, [...TEXTS, ...LABELS], { seed: 3 });
  const plainCfg = JSON.parse(readFileSync(join(plainDir, 'config.json'), 'utf8'));
  t.equal(plainCfg.label_isolation, undefined, 'opt-out: no flag');
  const p = await Gliner2Model.load(plainDir);
  t.notOk(p.labelIsolation);
  const all = normalizeSchema({ classifications: [{ task: CLASSIFICATION_TASK, labels: LABELS }] });
  const f = await p.format(TEXTS[0], all);
  t.equal(f.groups, undefined, 'no groups without the flag');
  const asked = async (labels: string[]) => {
    const s = normalizeSchema({ classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: false }] });
    return (await p.debugRun(TEXTS[0], s)).inter.segments[0].cls!;
  };
  const [a, b] = [await asked(LABELS), await asked([LABELS[0]])];
  t.ok(Math.abs(a[0] - b[0]) > 1e-4, `without it a label's logit moves with the other labels (${a[0]} vs ${b[0]})`);
});

/** The training graph's classification loss on a padded batch of TEXTS (each with one true label) against the
 * served model's BCE over the same texts and labels. */
async function graphAndServed(dir: string, m: Gliner2Model, labels: Partial<LabelPrompt>) {
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(dir, 'encoder_config', 'config.json'), 'utf8')));
  const ck = SafetensorsCheckpoint.open(dir);
  const tensors: Record<string, Float32Array> = {};
  for (const n of ck.names()) tensors[n] = toFloat32(ck.get(n));
  const wf = m.wordFeatures!;
  const feats = { rows: featureRows(wf), cols: featureCols(wf) };
  const graph = EncoderTrainGraph.create(enc, 8, true, tensors, null, {}, feats);
  const recs = TEXTS.map((text, i) =>
    ({ kind: 'classification' as const, text, labels: [LABELS[i * 3]], multiLabel: false }));
  const ex = recordsToExamples(recs, [], LABELS);
  const batch = collate(await Promise.all(ex.map((e) => featurize(m.tokenizer, e, 8, undefined, wf, labels))));
  const g = await graph.step(batch, { backward: false, dropNeg: false });
  let served = 0;
  for (const e of ex) {
    const { inter } = await m.debugRun(e.text, e.schema);
    const truth = new Set(e.classes.get(CLASSIFICATION_TASK));
    inter.segments[0].cls!.forEach((z, i) => {
      const y = truth.has(e.schema.classifications[0].labels[i]) ? 1 : 0;
      served += Math.max(z, 0) + Math.log1p(Math.exp(-Math.abs(z))) - y * z; // BCE with logits
    });
  }
  return { batch, graph: g.cls, served };
}

t.test('the training graph computes what the served model does, in a padded batch', async (t) => {
  const dir = join(tmp, 'iso');
  const { batch, graph, served } = await graphAndServed(dir, await Gliner2Model.load(dir), { isolation: true });
  t.ok(batch.groups && Math.max(...batch.groups) === LABELS.length, 'the batch carries the groups');
  t.ok(batch.mask.some((x) => x === 0), 'a padded batch');
  t.ok(Math.abs(graph - served) <= 1e-5 * served, `graph ${graph} vs served ${served}`);
});

t.test('the prompt builder: groups of [L] and label pieces, counted over classification segments', async (t) => {
  const dir = join(tmp, 'iso');
  const m = await Gliner2Model.load(dir);
  const s = normalizeSchema({
    entities: ['person'],
    classifications: [
      { task: 'sentiment', labels: ['good', 'bad'] },
      { task: CLASSIFICATION_TASK, labels: ['apple pay', 'age limit', 'pin blocked'] },
    ],
  });
  const f = await m.format(TEXTS[0], s);
  const g = f.groups!;
  t.equal(g.length, f.ids.length);
  const cls = f.segments.map((seg, i) => [seg, i] as const).filter(([seg]) => seg.kind === 'classification');
  let expect = 0;
  for (const [seg, si] of cls) {
    const markers = f.specialPos[si].slice(1); // [P], then the [L] markers
    seg.names.forEach((_, k) => {
      expect++;
      t.equal(g[markers[k]], expect, `${seg.name} label ${k}: its [L] in group ${expect}`);
      t.equal(g[f.specialPos[si][0]], 0, `${seg.name}: [P] shared`);
    });
  }
  t.equal(Math.max(...g), 5, 'five labels, five groups');
  for (const p of f.wordPos) t.equal(g[p], 0, 'text words shared');
  // every label's pieces are contiguous and run from its [L] up to the next [L] or the closing parenthesis
  const counts = new Map<number, number>();
  for (const x of g) if (x) counts.set(x, (counts.get(x) ?? 0) + 1);
  for (const [grp, c] of counts) t.ok(c >= 2, `group ${grp}: [L] and at least one piece (${c})`);
});

t.test('the recipe: an isolated base trains on sampled labels', async (t) => {
  t.equal(fullLabelRatio(true), 0);
  t.equal(fullLabelRatio(false), 1);
  t.equal(freshRecipe('small').full_label_ratio, 0, 'the fresh bases are isolated');
});

t.test('a fresh model with label bags: one token per label, served as trained, isolated', async (t) => {
  const dir = join(tmp, 'bag');
  initEncoder(dir, cfg, [...TEXTS, ...LABELS], { seed: 3 }); // the fresh default
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  t.ok(c.label_bag === true && c.label_isolation === true, 'init writes both flags');
  const m = await Gliner2Model.load(dir);
  const iso = await Gliner2Model.load(join(tmp, 'iso'));
  t.ok(m.labelBag && !iso.labelBag, 'the model reads the flag');
  const schema = normalizeSchema({
    classifications: [{ task: CLASSIFICATION_TASK, labels: LABELS, multi_label: false }],
  });
  const [fb, fi] = [await m.format(TEXTS[0], schema), await iso.format(TEXTS[0], schema)];
  const markers = fb.specialPos[0].slice(1);
  const bags = fb.labelBags!;
  let names = 0;
  for (const [k, label] of LABELS.entries()) {
    const pieces = [...(await m.tokenizer.pieces([label]))[0]!];
    names += pieces.length;
    const row = [...bags.bags.subarray(markers[k] * bags.cols, (markers[k] + 1) * bags.cols)].filter((x) => x >= 0);
    t.same(row, pieces, `${label}: its [L] row bags its pieces`);
    t.equal(fb.groups![markers[k]], k + 1, `${label}: its [L] alone in group ${k + 1}`);
  }
  t.equal(fb.ids.length, fi.ids.length - names, `the names take no tokens (${fb.ids.length} against ${fi.ids.length})`);
  t.equal(fb.groups!.filter((g) => g > 0).length, LABELS.length, 'a label is one token');
  for (const p of fb.wordPos) t.same([...bags.bags.subarray(p * bags.cols, (p + 1) * bags.cols)].filter((x) => x >= 0),
    [], 'text words carry no bag');

  let worst = 0;
  let spread = 0;
  for (const text of TEXTS) {
    const all = await logitsOf(m, text, LABELS);
    const vals = [...all.values()];
    spread = Math.max(spread, Math.max(...vals) - Math.min(...vals));
    const others = [await logitsOf(m, text, LABELS.slice().reverse()), await logitsOf(m, text, [LABELS[7], LABELS[2]])];
    worst = Math.max(worst, worstAcross(all, others));
  }
  t.ok(worst < 1e-5, `a label's logit whatever the other labels: ${worst.toExponential(2)}`);
  t.ok(spread > 1e-3, `the labels differ (spread ${spread.toExponential(2)})`);

  // the training graph's classification loss on a padded batch is the served model's
  const { batch, graph, served } = await graphAndServed(dir, m, { isolation: true, bag: true });
  t.ok(batch.bags && batch.mask.some((x) => x === 0), 'a padded batch with bags');
  t.ok(Math.abs(graph - served) <= 1e-5 * served, `graph ${graph} vs served ${served}`);
});
