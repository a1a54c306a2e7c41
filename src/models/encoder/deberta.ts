// DeBERTa-v2/v3 encoder on the native core (native/models/deberta.cc): config parsing, weight
// hand-over (fp32, or bf16 for the linear layers and the word embeddings) and the async forward.
import { addon } from '../../native/addon.ts';
import type { SafetensorsCheckpoint, TensorInfo } from '../../formats/safetensors.ts';
import { toFloat32 } from '../../formats/safetensors.ts';

export interface DebertaConfig {
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  intermediateSize: number;
  vocabSize: number;
  positionBuckets: number;
  maxRelativePositions: number;
  maxPositionEmbeddings: number;
  layerNormEps: number;
  posAttType: string[];
  hiddenAct: string;
}

export class EncoderConfigError extends Error {
  override name = 'EncoderConfigError';
}

/** Reads a DebertaV2Config (`encoder_config/config.json` of a GLiNER2 checkpoint). */
export function parseDebertaConfig(raw: Record<string, unknown>, where = 'config'): DebertaConfig {
  const num = (k: string, def?: number): number => {
    const v = raw[k];
    if (v === undefined || v === null) {
      if (def === undefined) throw new EncoderConfigError(`${where}: missing ${k}`);
      return def;
    }
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new EncoderConfigError(`${where}: ${k} must be a number`);
    return v;
  };
  const mt = raw.model_type;
  if (mt !== undefined && mt !== 'deberta-v2' && mt !== 'deberta-v3')
    throw new EncoderConfigError(`${where}: model_type ${String(mt)} is not supported (deberta-v2 only)`);
  if (raw.relative_attention === false) throw new EncoderConfigError(`${where}: relative_attention=false is not supported`);
  if (raw.position_biased_input === true) throw new EncoderConfigError(`${where}: position_biased_input=true is not supported`);
  if (raw.share_att_key === false) throw new EncoderConfigError(`${where}: share_att_key=false is not supported`);
  const act = (raw.hidden_act as string) ?? 'gelu';
  if (act !== 'gelu') throw new EncoderConfigError(`${where}: hidden_act ${act} is not supported`);
  const pat = raw.pos_att_type;
  const posAttType = Array.isArray(pat) ? (pat as string[]) : typeof pat === 'string' ? pat.split('|') : ['p2c', 'c2p'];
  const cfg: DebertaConfig = {
    hiddenSize: num('hidden_size'),
    numLayers: num('num_hidden_layers'),
    numHeads: num('num_attention_heads'),
    intermediateSize: num('intermediate_size'),
    vocabSize: num('vocab_size'),
    positionBuckets: num('position_buckets', -1),
    maxRelativePositions: num('max_relative_positions', -1),
    maxPositionEmbeddings: num('max_position_embeddings', 512),
    layerNormEps: num('layer_norm_eps', 1e-7),
    posAttType,
    hiddenAct: act,
  };
  if (cfg.hiddenSize % cfg.numHeads !== 0) throw new EncoderConfigError(`${where}: hidden_size must be a multiple of num_attention_heads`);
  return cfg;
}

export interface DebertaLoadOptions {
  /** 'bf16': linear weights and word embeddings are kept as bf16 (fp32 compute). Default 'f32'. */
  dtype?: 'f32' | 'bf16';
  /** word features (fresh GLiNER2 encoders, word-features.ts): table rows and ids per piece */
  wordFeatures?: { rows: number; cols: number };
}

/** Native handle plus the config. */
export class DebertaEncoder {
  private constructor(
    readonly config: DebertaConfig,
    readonly dtype: 'f32' | 'bf16',
    private readonly handle: unknown,
  ) {}

  /** Loads from a checkpoint; `prefix` is '' for a bare DebertaV2Model or 'encoder.' for GLiNER2. */
  static async load(ckpt: SafetensorsCheckpoint, config: DebertaConfig, prefix = '', opts: DebertaLoadOptions = {}): Promise<DebertaEncoder> {
    const dtype = opts.dtype ?? 'f32';
    const tensors: Record<string, Float32Array | Uint16Array> = {};
    const D = config.hiddenSize;
    const isWeight = (n: string) =>
      n === 'embeddings.word_embeddings.weight' || (/^encoder\.layer\.\d+\./.test(n) && n.endsWith('.weight') && !n.includes('LayerNorm'));
    for (const name of ckpt.names()) {
      if (!name.startsWith(prefix)) continue;
      const n = name.slice(prefix.length);
      if (!(n.startsWith('embeddings.') || n.startsWith('encoder.'))) continue;
      const t = ckpt.get(name);
      tensors[n] = dtype === 'bf16' && isWeight(n) ? toBf16(t) : toFloat32(t);
    }
    const we = tensors['embeddings.word_embeddings.weight'];
    if (!we) throw new EncoderConfigError(`checkpoint has no ${prefix}embeddings.word_embeddings.weight`);
    const rows = we.length / D;
    const wf = opts.wordFeatures;
    const ft = tensors['embeddings.word_feature_embeddings.weight'];
    if (wf && (!ft || ft.length !== wf.rows * D))
      throw new EncoderConfigError(
        `checkpoint needs ${prefix}embeddings.word_feature_embeddings.weight of shape [${wf.rows}, ${D}] ` +
          '(config.json word_features)',
      );
    // The embedding matrix may have been resized after the config was written: trust the tensor.
    const cfg = { ...config, vocabSize: rows };
    const handle = await addon.debertaCreate(
      {
        D,
        L: cfg.numLayers,
        H: cfg.numHeads,
        F: cfg.intermediateSize,
        V: rows,
        positionBuckets: cfg.positionBuckets,
        maxRelativePositions: cfg.maxRelativePositions,
        maxPositionEmbeddings: cfg.maxPositionEmbeddings,
        eps: cfg.layerNormEps,
        c2p: cfg.posAttType.includes('c2p'),
        p2c: cfg.posAttType.includes('p2c'),
        bf16: dtype === 'bf16',
        featRows: wf?.rows ?? 0,
        featCols: wf?.cols ?? 0,
      },
      tensors,
    );
    return new DebertaEncoder(cfg, dtype, handle);
  }

  /** Releases the native weights now rather than at garbage collection (a forward in flight finishes); every later
   * call fails with "deberta handle is invalid". */
  free(): void {
    addon.debertaFree(this.handle);
  }

  /** ids/mask (B*N) → last hidden state (B*N*D), padded positions zeroed; feats: word-feature rows (B*N*cols);
   * groups: label-isolation groups (B*N, label-isolation.ts); bags: label bags (B*N*cols, label-isolation.ts). */
  forward(
    ids: Int32Array, mask: Uint8Array, B: number, N: number, feats?: Int32Array, groups?: Int32Array,
    bags?: Int32Array,
  ): Promise<Float32Array> {
    return addon.debertaForward(this.handle, ids, mask, B, N, false, feats, groups, bags) as Promise<Float32Array>;
  }

  /** All hidden states ((L+1)*B*N*D): embeddings output, then each layer's output. */
  forwardHiddenStates(ids: Int32Array, mask: Uint8Array, B: number, N: number): Promise<Float32Array> {
    return addon.debertaForward(this.handle, ids, mask, B, N, true) as Promise<Float32Array>;
  }

  /** Row of rel_embeddings used for relative position rel = i − j (log buckets + clamp). */
  relIndex(rel: number): number {
    return addon.debertaRelIndex(
      { positionBuckets: this.config.positionBuckets, maxRelativePositions: this.config.maxRelativePositions, maxPositionEmbeddings: this.config.maxPositionEmbeddings },
      rel,
    ) as number;
  }
}

/** Tensor as bf16 bits (BF16 viewed/copied, F32 rounded to nearest even). */
export function toBf16(t: TensorInfo): Uint16Array {
  const n = t.shape.reduce((a, c) => a * c, 1);
  if (t.dtype === 'BF16') {
    return t.bytes.byteOffset % 2 === 0 ? new Uint16Array(t.bytes.buffer, t.bytes.byteOffset, n) : new Uint16Array(t.bytes.slice().buffer);
  }
  const f = toFloat32(t);
  const out = new Uint16Array(n);
  addon.convertF32ToBf16(f, out);
  return out;
}
