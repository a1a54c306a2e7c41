// Typed wrappers over the native training graphs (native/train, native/napi/train_napi.cc).
// A graph owns every parameter natively (value, gradient, AdamW moments); TypeScript feeds
// micro-batches, asks for optimizer steps and reads tensors back to save checkpoints.
import { addon } from '../native/addon.ts';
import type { DecoderConfig } from '../formats/hf-config.ts';
import type { DebertaConfig } from '../models/encoder/deberta.ts';

export interface ParamInfo {
  name: string;
  shape: number[];
  trainable: boolean;
  /** learning-rate group: 0 encoder (or decoder LoRA), 1 heads (and encoder LoRA, at task_lr) */
  group: number;
}

export interface OptimOptions {
  /** one learning rate per group */
  lr: number[];
  weightDecay: number;
  maxGradNorm: number;
  /** 1-based optimizer step */
  step: number;
  betas?: [number, number];
  eps?: number;
  /** after the step, move the weights' exponential moving average with this decay (0 / absent: none) */
  emaDecay?: number;
}

abstract class TrainGraph {
  protected constructor(protected readonly handle: unknown) {}
  params(): ParamInfo[] {
    return addon.trainParams(this.handle) as ParamInfo[];
  }
  get(name: string): Float32Array {
    return addon.trainGet(this.handle, name, false) as Float32Array;
  }
  grad(name: string): Float32Array {
    return addon.trainGet(this.handle, name, true) as Float32Array;
  }
  set(name: string, value: Float32Array): void {
    addon.trainSet(this.handle, name, value);
  }
  zeroGrad(): void {
    addon.trainZeroGrad(this.handle);
  }
  /** Clips the gradients (global norm) and applies AdamW; resolves to the pre-clip norm. */
  optimizerStep(o: OptimOptions): Promise<number> {
    return addon.trainOptimStep(this.handle, {
      lr: o.lr,
      wd: o.weightDecay,
      maxGradNorm: o.maxGradNorm,
      step: o.step,
      b1: o.betas?.[0] ?? 0.9,
      b2: o.betas?.[1] ?? 0.999,
      eps: o.eps ?? 1e-8,
      emaDecay: o.emaDecay ?? 0,
    }) as Promise<number>;
  }
  /** Exchanges the weights and their moving average (optimizerStep's emaDecay); false when there is none yet. */
  emaSwap(): boolean {
    return addon.trainEmaSwap(this.handle) as boolean;
  }
}

// ---------------------------------------------------------------------------------------------
// Decoder (LoRA SFT)
// ---------------------------------------------------------------------------------------------
export interface DecoderLoraInit {
  layer: number;
  /** 0..6: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj */
  module: number;
  r: number;
  scale: number;
  dropout: number;
  A: Float32Array;
  B: Float32Array;
}

export interface DecoderBatch {
  tokens: Int32Array;
  positions: Int32Array;
  /** target of each row (the next token), -100 = no loss */
  labels: Int32Array;
  /** (S+1) row offsets of the packed sequences */
  seqOff: Int32Array;
  /**
   * (S) per sequence, the earlier sequence it continues or -1 (forward only): its rows attend to all of that
   * sequence's rows, then causally to their own; a prompt shared by several completions is computed once.
   */
  seqParent?: Int32Array;
}

export class DecoderTrainGraph extends TrainGraph {
  /** precision 'bf16': the base weights' products (layers and lm_head) in bf16 compute; LoRA's stay fp32 */
  static create(
    config: DecoderConfig, tensors: Record<string, Float32Array | Uint16Array>, loras: DecoderLoraInit[],
    precision: 'fp32' | 'bf16' = 'fp32',
  ): DecoderTrainGraph {
    const r = config.ropeScaling;
    const cfg = {
      vocab: config.vocabSize,
      hidden: config.hiddenSize,
      inter: config.intermediateSize,
      layers: config.numLayers,
      heads: config.numHeads,
      kvHeads: config.numKvHeads,
      headDim: config.headDim,
      eps: config.rmsNormEps,
      ropeTheta: config.ropeTheta,
      qkvBias: config.attentionBias,
      rope: { type: r.type === 'llama3' ? 1 : r.type === 'linear' ? 2 : 0, factor: r.factor, lowFreqFactor: r.lowFreqFactor, highFreqFactor: r.highFreqFactor, originalMaxPosition: r.originalMaxPosition },
      precision,
    };
    return new DecoderTrainGraph(addon.llamaTrainCreate(cfg, tensors, loras));
  }
  /**
   * Forward of a batch: the log-probability of each row's label (0 where label < 0). With `keep` (default)
   * the activations stay for `backward` (replacing any pending ones); `lora: false` runs the base model
   * alone (the reference policy of DPO / GRPO, no second copy of the weights); LoRA dropout applies to
   * kept forwards unless `dropout: false`. `temperature` scores log softmax(logits / temperature) (GRPO
   * scores its samples at the sampling temperature, as TRL does); backward accounts for it.
   */
  forward(b: DecoderBatch, opts: { keep?: boolean; lora?: boolean; dropout?: boolean; seed?: number; wantLogits?: boolean; temperature?: number } = {}): Promise<{ logp: Float32Array; logits?: Float32Array }> {
    const keep = opts.keep ?? true;
    return addon.llamaTrainForward(this.handle, { ...b, keep, lora: opts.lora ?? true, dropout: opts.dropout ?? keep, seed: opts.seed ?? 0, wantLogits: opts.wantLogits ?? false, temperature: opts.temperature ?? 1 });
  }
  /** Backward of the last kept forward from the loss's gradient w.r.t. its log-probabilities (LoRA grads accumulate). */
  backward(dlogp: Float32Array): Promise<void> {
    return addon.llamaTrainBackward(this.handle, dlogp);
  }
  /** SFT in one call: forward, masked CE (mean over counted rows), backward scaled by gradScale. */
  step(b: DecoderBatch, opts: { backward?: boolean; gradScale?: number; seed?: number; wantLogits?: boolean } = {}): Promise<{ loss: number; counted: number; logits?: Float32Array }> {
    return addon.llamaTrainStep(this.handle, { ...b, backward: opts.backward ?? true, gradScale: opts.gradScale ?? 1, seed: opts.seed ?? 0, wantLogits: opts.wantLogits ?? false });
  }
}

// ---------------------------------------------------------------------------------------------
// Encoder (GLiNER2 span model)
// ---------------------------------------------------------------------------------------------
export interface EncoderBatch {
  B: number;
  N: number;
  ids: Int32Array;
  mask: Uint8Array;
  woff: Int32Array;
  /** first piece of each word (rows into the B·N hidden states) */
  wordRows: Int32Array;
  /** exclusive end row of each word's pieces (required by mean / max token pooling) */
  wordEnd?: Int32Array;
  segSample: Int32Array;
  segKind: Int32Array;
  segM: Int32Array;
  segCount: Int32Array;
  segCountLoss: Uint8Array;
  /** per segment: 1 = softmax cross-entropy over its labels (classification), absent / 0 = BCE */
  segSoftmax?: Uint8Array;
  segRows: Int32Array;
  pos: Int32Array;
  clsY: Float32Array;
  /** word-feature rows of each piece (B·N·cols, -1 = none), for a model with word features */
  feats?: Int32Array;
  /** label-isolation group of each piece (B·N, 0 for padding), for a model with label isolation */
  groups?: Int32Array;
  /** label bags (B·N·cols, -1 = none; src/models/encoder/label-isolation.ts), for a model with label bags */
  bags?: Int32Array;
}

export interface EncoderStepOptions {
  backward?: boolean;
  dropNeg?: boolean;
  /** with dropNeg: the probability that a negative span enters the span loss (GLiNER's 0.5 by default) */
  negKeep?: number;
  /** with dropNeg: negatives never dropped: 0 none, 1 a span that is a mention under another label, 2 also a span
   * that starts or ends where a mention does */
  negHard?: number;
  gradScale?: number;
  /** negative dropping and dropout masks derive from it: the same seed gives the same masks */
  seed?: number;
  /** DeBERTa hidden dropout (embeddings, attention output, FFN output); applied whenever > 0 */
  hiddenDropout?: number;
  /** dropout of the attention probabilities; applied whenever > 0 */
  attentionDropout?: number;
}

export interface EncoderLoss {
  loss: number;
  span: number;
  count: number;
  cls: number;
  /** the classifier's logits, the classification segments' in batch order (as clsY holds their targets) */
  clsLogits?: Float32Array;
}

/** GLiNER2 head variants the training graph runs (the checkpoint's count_embed layer and token_pooling). */
export interface EncoderHeadOptions {
  counting?: 'count_lstm' | 'count_lstm_v2';
  pooling?: 'first' | 'mean' | 'max';
  /** count_lstm_v2 transformer width (rows of count_embed.transformer.in_projector.weight; 128 in the library) */
  countHidden?: number;
  /** count_lstm_v2 feed-forward width (rows of …layers.0.linear1.weight; 2 × countHidden) */
  countFF?: number;
}

export class EncoderTrainGraph extends TrainGraph {
  static create(
    config: DebertaConfig,
    maxWidth: number,
    relLayerNorm: boolean,
    tensors: Record<string, Float32Array>,
    lora: { r: number; alpha: number; dropout: number; targets: string[]; seed: number } | null,
    heads: EncoderHeadOptions = {},
    /** word features (fresh encoders): rows of encoder.embeddings.word_feature_embeddings.weight, ids per piece */
    wordFeatures?: { rows: number; cols: number },
    /** compute precision of the graph's products: 'bf16' rounds their operands to bf16 (fp32 accumulation, fp32
     *  master weights, gradients and AdamW state); fast only where the CPU has AVX512_BF16 (see resolvePrecision) */
    precision: 'fp32' | 'bf16' = 'fp32',
  ): EncoderTrainGraph {
    const cfg = {
      D: config.hiddenSize,
      L: config.numLayers,
      H: config.numHeads,
      F: config.intermediateSize,
      V: config.vocabSize,
      positionBuckets: config.positionBuckets,
      maxRelativePositions: config.maxRelativePositions,
      maxPositionEmbeddings: config.maxPositionEmbeddings,
      eps: config.layerNormEps,
      c2p: config.posAttType.includes('c2p'),
      p2c: config.posAttType.includes('p2c'),
      K: maxWidth,
      relLn: relLayerNorm,
      counting: heads.counting ?? 'count_lstm',
      pooling: heads.pooling ?? 'first',
      countHidden: heads.countHidden ?? 128,
      countFF: heads.countFF ?? 2 * (heads.countHidden ?? 128),
      featRows: wordFeatures?.rows ?? 0,
      featCols: wordFeatures?.cols ?? 0,
      precision,
    };
    return new EncoderTrainGraph(addon.encTrainCreate(cfg, tensors, lora));
  }
  step(b: EncoderBatch, opts: EncoderStepOptions = {}): Promise<EncoderLoss> {
    return addon.encTrainStep(this.handle, {
      ...b, backward: opts.backward ?? true, dropNeg: opts.dropNeg ?? true, negKeep: opts.negKeep ?? 0.5,
      negHard: opts.negHard ?? 0,
      gradScale: opts.gradScale ?? 1,
      seed: opts.seed ?? 0,
      hiddenDropout: opts.hiddenDropout ?? 0, attentionDropout: opts.attentionDropout ?? 0,
    });
  }
}
