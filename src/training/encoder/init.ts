// Fresh GLiNER2 span models (count_lstm counting layer) from a configuration, initialized as the
// reference does, written in the real checkpoint layout (spec §1.2) so loadEncoder() and the
// trainer load them like any published checkpoint:
//   config.json, encoder_config/config.json, model.safetensors, tokenizer.json, tokenizer_config.json
// Initialization: DeBERTa's _init_weights (Linear / Embedding ~ N(0, 0.02), biases 0, LayerNorm 1/0,
// rel_embeddings ~ N(0, 0.02)); the heads keep PyTorch's defaults (Linear weight and bias
// U(±1/√in), GRU U(±1/√hidden), pos_embedding N(0, 1)). Deterministic from `seed`.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type TensorToWrite } from '../../formats/safetensors.ts';
import type { TokenPooling } from '../../models/encoder/gliner2.ts';
import { buildWordPieceVocab, wordPieceTokenizerJson } from './wordpiece.ts';
import { MARKERS } from '../../models/encoder/tokenizer.ts';
import { FRESH_LABEL_BAG, FRESH_LABEL_ISOLATION } from './recipe.ts';
import {
  DEFAULT_WORD_FEATURES, featureRows, parseWordFeatures, wordFeaturesJson, type WordFeatures,
} from '../../models/encoder/word-features.ts';

export interface EncoderInitConfig {
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  intermediate_size: number;
  /** tokenizer vocabulary size to build (the embedding gets exactly the built size) */
  vocab_size: number;
  max_width?: number;
  position_buckets?: number;
  max_position_embeddings?: number;
  /** word features (config.json form, src/models/encoder/word-features.ts); absent: the default (shape
   * classes), null: none (the model GLiNER2 defines, nothing added to the embeddings) */
  word_features?: { shape?: boolean; suffix_buckets?: number; prefix_buckets?: number; shape_buckets?: number } | null;
  /** classification labels isolated from each other (config.json `label_isolation`,
   * src/models/encoder/label-isolation.ts); absent: FRESH_LABEL_ISOLATION (on), false: the model GLiNER2 defines */
  label_isolation?: boolean;
  /** each classification label one `[L]` token with its name's pieces bagged (config.json `label_bag`,
   * src/models/encoder/label-isolation.ts); absent: FRESH_LABEL_BAG */
  label_bag?: boolean;
  /** how a word's pieces become the word's vector (config.json `token_pooling`); absent: FRESH_TOKEN_POOLING */
  token_pooling?: TokenPooling;
}

export const TOKEN_POOLING_OPTIONS: readonly TokenPooling[] = ['first', 'mean', 'max'];
/** A fresh model's word vector: the mean of the word's pieces. GLiNER2's pretrained checkpoints pool the first
 * piece, which a pretrained encoder has filled with the word; a fresh one trained on CoNLL-2003 found names it had
 * not seen in train better from the mean (dev F1 0.855 -> 0.870 and 0.856 -> 0.873, seeds 42 and 43, 4,000 steps;
 * docs/training.md, "Word pooling"). */
export const FRESH_TOKEN_POOLING: TokenPooling = 'mean';

/** The word features a fresh model gets from `cfg` (DEFAULT_WORD_FEATURES when it names none). */
export function initWordFeatures(cfg: EncoderInitConfig): WordFeatures | null {
  if (cfg.word_features === undefined) return DEFAULT_WORD_FEATURES;
  return parseWordFeatures(cfg.word_features, 'word_features');
}

export const ENCODER_PRESETS: Record<string, EncoderInitConfig> = {
  tiny: { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 4000 },
  small: { hidden_size: 256, num_hidden_layers: 4, num_attention_heads: 4, intermediate_size: 1024, vocab_size: 12000 },
  base: { hidden_size: 768, num_hidden_layers: 12, num_attention_heads: 12, intermediate_size: 3072, vocab_size: 32000 },
};

/** Seeded PRNG (mulberry32) with a Box-Muller normal. */
export class InitRng {
  private s: number;
  private spare: number | null = null;
  constructor(seed: number) {
    this.s = seed >>> 0 || 0x9e3779b9;
  }
  uniform(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  normal(): number {
    if (this.spare !== null) {
      const v = this.spare;
      this.spare = null;
      return v;
    }
    let u = 0;
    while (u === 0) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
}

export interface InitResult {
  dir: string;
  parameters: number;
  vocabSize: number;
}

/** Creates the tensors of a fresh model (checkpoint names). */
export function initEncoderTensors(cfg: EncoderInitConfig, vocabSize: number, seed = 42): Record<string, Float32Array> {
  const rng = new InitRng(seed);
  const D = cfg.hidden_size;
  const F = cfg.intermediate_size;
  const S2 = 2 * (cfg.position_buckets ?? 256);
  const t: Record<string, Float32Array> = {};
  const normal = (n: number, std: number) => Float32Array.from({ length: n }, () => rng.normal() * std);
  const unif = (n: number, b: number) => Float32Array.from({ length: n }, () => (rng.uniform() * 2 - 1) * b);
  const ones = (n: number) => new Float32Array(n).fill(1);
  const encLinear = (name: string, out: number, inp: number) => {
    t[name + '.weight'] = normal(out * inp, 0.02);
    t[name + '.bias'] = new Float32Array(out);
  };
  const headLinear = (name: string, out: number, inp: number) => {
    const b = 1 / Math.sqrt(inp);
    t[name + '.weight'] = unif(out * inp, b);
    t[name + '.bias'] = unif(out, b);
  };
  const emb = normal(vocabSize * D, 0.02);
  emb.fill(0, 0, D); // padding_idx 0
  t['encoder.embeddings.word_embeddings.weight'] = emb;
  t['encoder.embeddings.LayerNorm.weight'] = ones(D);
  t['encoder.embeddings.LayerNorm.bias'] = new Float32Array(D);
  t['encoder.encoder.rel_embeddings.weight'] = normal(S2 * D, 0.02);
  t['encoder.encoder.LayerNorm.weight'] = ones(D);
  t['encoder.encoder.LayerNorm.bias'] = new Float32Array(D);
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `encoder.encoder.layer.${l}.`;
    encLinear(p + 'attention.self.query_proj', D, D);
    encLinear(p + 'attention.self.key_proj', D, D);
    encLinear(p + 'attention.self.value_proj', D, D);
    encLinear(p + 'attention.output.dense', D, D);
    t[p + 'attention.output.LayerNorm.weight'] = ones(D);
    t[p + 'attention.output.LayerNorm.bias'] = new Float32Array(D);
    encLinear(p + 'intermediate.dense', F, D);
    encLinear(p + 'output.dense', D, F);
    t[p + 'output.LayerNorm.weight'] = ones(D);
    t[p + 'output.LayerNorm.bias'] = new Float32Array(D);
  }
  const sp = 'span_rep.span_rep_layer.';
  headLinear(sp + 'project_start.0', 4 * D, D);
  headLinear(sp + 'project_start.3', D, 4 * D);
  headLinear(sp + 'project_end.0', 4 * D, D);
  headLinear(sp + 'project_end.3', D, 4 * D);
  headLinear(sp + 'out_project.0', 4 * D, 2 * D);
  headLinear(sp + 'out_project.3', D, 4 * D);
  headLinear('classifier.0', 2 * D, D);
  headLinear('classifier.2', 1, 2 * D);
  headLinear('count_pred.0', 2 * D, D);
  headLinear('count_pred.2', 20, 2 * D);
  t['count_embed.pos_embedding.weight'] = normal(20 * D, 1);
  const gb = 1 / Math.sqrt(D);
  t['count_embed.gru.weight_ih_l0'] = unif(3 * D * D, gb);
  t['count_embed.gru.weight_hh_l0'] = unif(3 * D * D, gb);
  t['count_embed.gru.bias_ih_l0'] = unif(3 * D, gb);
  t['count_embed.gru.bias_hh_l0'] = unif(3 * D, gb);
  headLinear('count_embed.projector.0', 4 * D, 2 * D);
  headLinear('count_embed.projector.2', D, 4 * D);
  initLocalAttention(t, cfg);
  // Word features start at zero: at init the model computes exactly what it would without them (every other
  // tensor is drawn as before), and training moves the rows (their gradient does not depend on their value).
  // Drawn N(0, 0.02) like the word embeddings, the shared xxxx row made the text words alike and a 6-intent
  // Banking77 run stayed at chance (test/training/encoder-classification.test.ts; docs/training.md).
  const wf = initWordFeatures(cfg);
  if (wf) t['encoder.embeddings.word_feature_embeddings.weight'] = new Float32Array(featureRows(wf) * D);
  return t;
}

/** Attention logit (after DeBERTa's 1/√(3d) scaling) that a local head gives its target offset at init. */
export const LOCAL_ATTENTION_LOGIT = 6;

/**
 * Local attention at init. With DeBERTa's N(0, 0.02) weights every head starts near-uniform, so all `[L]` (and
 * `[E]`, `[R]`, `[C]`) markers of a prompt start with the same state: the classifier then sees identical inputs
 * for every label, the per-label gradients cancel on them, and a fresh model learns many-label classification
 * only through the labels' positions (a sampled, shuffled label prompt stays at the prior). Here, in every layer,
 * heads 0 .. H/2-1 start attending to the token h+1 places to their right — a marker to its label's words — through
 * the key bias alone: b_k = c·v/|v|² with v = W_q·LN(rel_emb[δ = -(h+1)]) (the head's position query of that
 * offset), so the p2c term K_j·Q_r(δ) gains exactly c at that offset and c·cos(v, v_δ') elsewhere, while in c2c
 * and c2p the bias adds q_i·b_k, the same for every key of a query, which softmax ignores. c = LOCAL_ATTENTION_LOGIT
 * ·√(3d). The weights stay trainable; pretrained checkpoints are not touched.
 */
export function initLocalAttention(t: Record<string, Float32Array>, cfg: EncoderInitConfig): void {
  const D = cfg.hidden_size;
  const H = cfg.num_attention_heads;
  const d = D / H;
  const span = cfg.position_buckets ?? 256;
  const rel = t['encoder.encoder.rel_embeddings.weight'];
  const lnRow = (r: number): Float64Array => {
    const x = Float64Array.from(rel.subarray(r * D, (r + 1) * D));
    const mean = x.reduce((a, b) => a + b, 0) / D;
    const v = x.reduce((a, b) => a + (b - mean) ** 2, 0) / D;
    return x.map((y) => (y - mean) / Math.sqrt(v + 1e-7)); // encoder.encoder.LayerNorm at init (1, 0)
  };
  const c = LOCAL_ATTENTION_LOGIT * Math.sqrt(3 * d);
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `encoder.encoder.layer.${l}.attention.self.`;
    const Wq = t[p + 'query_proj.weight'];
    const bq = t[p + 'query_proj.bias'];
    const bk = t[p + 'key_proj.bias'];
    for (let h = 0; h < Math.max(1, Math.floor(H / 2)); h++) {
      const r = lnRow(span - (h + 1)); // relative position δ = i - j = -(h + 1): the key h+1 tokens to the right
      const v = new Float64Array(d);
      for (let u = 0; u < d; u++) {
        let a = bq[h * d + u];
        for (let i = 0; i < D; i++) a += Wq[(h * d + u) * D + i] * r[i];
        v[u] = a;
      }
      const n2 = v.reduce((a, b) => a + b * b, 0);
      for (let u = 0; u < d; u++) bk[h * d + u] = (c * v[u]) / n2;
    }
  }
}

export function encoderConfigJson(cfg: EncoderInitConfig, vocabSize: number): Record<string, unknown> {
  return {
    model_type: 'deberta-v2',
    architectures: ['DebertaV2Model'],
    hidden_size: cfg.hidden_size,
    num_hidden_layers: cfg.num_hidden_layers,
    num_attention_heads: cfg.num_attention_heads,
    intermediate_size: cfg.intermediate_size,
    hidden_act: 'gelu',
    hidden_dropout_prob: 0.1,
    attention_probs_dropout_prob: 0.1,
    initializer_range: 0.02,
    layer_norm_eps: 1e-7,
    max_position_embeddings: cfg.max_position_embeddings ?? 512,
    max_relative_positions: -1,
    position_buckets: cfg.position_buckets ?? 256,
    norm_rel_ebd: 'layer_norm',
    pos_att_type: ['p2c', 'c2p'],
    position_biased_input: false,
    relative_attention: true,
    share_att_key: true,
    type_vocab_size: 0,
    pad_token_id: 0,
    vocab_size: vocabSize,
  };
}

export function gliner2ConfigJson(cfg: EncoderInitConfig, name: string): Record<string, unknown> {
  const wf = initWordFeatures(cfg);
  return {
    ...(wf ? { word_features: wordFeaturesJson(wf) } : {}),
    ...((cfg.label_isolation ?? FRESH_LABEL_ISOLATION) ? { label_isolation: true } : {}),
    ...((cfg.label_bag ?? FRESH_LABEL_BAG) ? { label_bag: true } : {}),
    architecture: 'span',
    architecture_version: 1,
    architectures: ['GLiNER2'],
    counting_layer: 'count_lstm',
    max_width: cfg.max_width ?? 8,
    span_head: { dropout: 0.1, max_width: cfg.max_width ?? 8, span_mode: 'markerV0' },
    model_name: name,
    model_type: 'extractor',
    token_pooling: cfg.token_pooling ?? FRESH_TOKEN_POOLING,
  };
}

export function tokenizerConfigJson(): Record<string, unknown> {
  return {
    backend: 'tokenizers',
    tokenizer_class: 'PreTrainedTokenizerFast',
    pad_token: '[PAD]',
    unk_token: '[UNK]',
    cls_token: '[CLS]',
    sep_token: '[SEP]',
    mask_token: '[MASK]',
    extra_special_tokens: [...MARKERS],
    do_lower_case: false,
  };
}

/** Writes a fresh model (tokenizer built from `texts`) to `dir`. */
export function initEncoder(dir: string, cfg: EncoderInitConfig, texts: Iterable<string>, opts: { seed?: number; name?: string } = {}): InitResult {
  if (cfg.token_pooling !== undefined && !TOKEN_POOLING_OPTIONS.includes(cfg.token_pooling))
    throw new Error(`token_pooling must be one of ${TOKEN_POOLING_OPTIONS.join(', ')}`);
  const vocab = buildWordPieceVocab(texts, { vocabSize: cfg.vocab_size });
  const tensors = initEncoderTensors(cfg, vocab.length, opts.seed ?? 42);
  mkdirSync(join(dir, 'encoder_config'), { recursive: true });
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(wordPieceTokenizerJson(vocab)));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(tokenizerConfigJson(), null, 2));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(gliner2ConfigJson(cfg, opts.name ?? 'loom-fresh-deberta-v2'), null, 2));
  writeFileSync(join(dir, 'encoder_config', 'config.json'), JSON.stringify(encoderConfigJson(cfg, vocab.length), null, 2));
  const out: Record<string, TensorToWrite> = {};
  let parameters = 0;
  const shapes = tensorShapes(cfg, vocab.length);
  for (const [n, v] of Object.entries(tensors)) {
    out[n] = { dtype: 'F32', shape: shapes[n] ?? [v.length], data: v };
    parameters += v.length;
  }
  writeSafetensors(join(dir, 'model.safetensors'), out, { format: 'pt' });
  return { dir, parameters, vocabSize: vocab.length };
}

/** Checkpoint shapes of every tensor (weights are [out, in]). */
export function tensorShapes(cfg: EncoderInitConfig, V: number): Record<string, number[]> {
  const D = cfg.hidden_size;
  const F = cfg.intermediate_size;
  const S2 = 2 * (cfg.position_buckets ?? 256);
  const s: Record<string, number[]> = {};
  const lin = (n: string, o: number, i: number) => {
    s[n + '.weight'] = [o, i];
    s[n + '.bias'] = [o];
  };
  s['encoder.embeddings.word_embeddings.weight'] = [V, D];
  const wf = initWordFeatures(cfg);
  if (wf) s['encoder.embeddings.word_feature_embeddings.weight'] = [featureRows(wf), D];
  s['encoder.encoder.rel_embeddings.weight'] = [S2, D];
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const p = `encoder.encoder.layer.${l}.`;
    for (const m of ['attention.self.query_proj', 'attention.self.key_proj', 'attention.self.value_proj', 'attention.output.dense']) lin(p + m, D, D);
    lin(p + 'intermediate.dense', F, D);
    lin(p + 'output.dense', D, F);
  }
  const sp = 'span_rep.span_rep_layer.';
  lin(sp + 'project_start.0', 4 * D, D);
  lin(sp + 'project_start.3', D, 4 * D);
  lin(sp + 'project_end.0', 4 * D, D);
  lin(sp + 'project_end.3', D, 4 * D);
  lin(sp + 'out_project.0', 4 * D, 2 * D);
  lin(sp + 'out_project.3', D, 4 * D);
  lin('classifier.0', 2 * D, D);
  lin('classifier.2', 1, 2 * D);
  lin('count_pred.0', 2 * D, D);
  lin('count_pred.2', 20, 2 * D);
  s['count_embed.pos_embedding.weight'] = [20, D];
  s['count_embed.gru.weight_ih_l0'] = [3 * D, D];
  s['count_embed.gru.weight_hh_l0'] = [3 * D, D];
  lin('count_embed.projector.0', 4 * D, 2 * D);
  lin('count_embed.projector.2', D, 4 * D);
  return s;
}
