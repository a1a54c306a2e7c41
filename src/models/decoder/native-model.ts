// Typed wrapper over the native Llama-family decoder (native/models/llama.cc via llama_napi.cc):
// weights handed to C++ once (packed there), a paged KV cache, LoRA adapters, and `step()` —
// one async native call per scheduler step.
import { addon } from '../../native/addon.ts';
import type { DecoderConfig } from '../../formats/hf-config.ts';

/** Rows of ggml blocks, kept block-quantized by the native decoder (native/include/loom/quant.h). */
export type QuantDtype = 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1' | 'Q8_0' | 'Q4_K' | 'Q5_K' | 'Q6_K' | 'Q8_K';
export const QUANT_DTYPES: readonly QuantDtype[] = [
  'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K', 'Q8_K',
];
export type WeightDtype = 'F32' | 'F16' | 'BF16' | QuantDtype;

export interface NativeWeight {
  /** embed | lm_head | norm | layers.<i>.{attn_norm,mlp_norm,qkv,qkv_bias,o,gate_up,down} */
  name: string;
  dtype: WeightDtype;
  /** the tensor, or its row blocks in order (joined natively, off the event loop: q;k;v and gate;up) */
  data: Uint8Array | Uint8Array[];
  /** one dtype per row block when they differ (a Q4_K_M file's q, k in Q4_K and v in Q6_K): kept apart, stacked */
  dtypes?: WeightDtype[];
  rows: number;
  cols: number;
}

/** LoRA slots in the native model (order matters: it is the C++ enum). */
export const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraModuleName = (typeof LORA_MODULES)[number];

export interface NativeLoraModule {
  layer: number;
  module: number;
  r: number;
  scale: number;
  A: Float32Array; // (r, in)
  B: Float32Array; // (out, r)
}

/** One step's batch: sequences' new tokens laid out back to back. */
export interface StepBatch {
  tokens: Int32Array; // (T)
  positions: Int32Array; // (T)
  seqLens: Int32Array; // (S): tokens contributed by each sequence
  tables: Int32Array; // concatenated block tables
  tableOffsets: Int32Array; // (S + 1)
  adapters?: Int32Array; // (S): adapter id or -1
  outRows: Int32Array; // rows whose logits (or hidden states) are returned
  hidden?: boolean;
  /** [src, dst, nSlots] triples of KV blocks to copy before the forward (copy-on-write). */
  copies?: Int32Array;
  /** (outRows.length), logits only: filled by the step with each row's argmaxF32, on the native threads. */
  argmax?: Int32Array;
}

/** Storage dtype of the paged KV cache (the math is fp32 either way). */
export type KvDtype = 'f32' | 'bf16';

export class NativeKvCache {
  readonly handle: unknown;
  readonly blocks: number;
  readonly blockSize: number;
  readonly dtype: KvDtype;
  readonly bytes: number;
  constructor(cfg: DecoderConfig, blocks: number, blockSize: number, dtype: KvDtype = 'f32') {
    if (dtype !== 'f32' && dtype !== 'bf16') throw new RangeError(`KV cache dtype must be f32 or bf16 (got ${String(dtype)})`);
    this.handle = addon.kvCreate({ layers: cfg.numLayers, blocks, blockSize, kvHeads: cfg.numKvHeads, headDim: cfg.headDim, dtype: dtype === 'bf16' ? 'BF16' : 'F32' });
    this.blocks = blocks;
    this.blockSize = blockSize;
    this.dtype = dtype;
    this.bytes = addon.kvBytes(this.handle) as number;
    if (this.bytes !== blocks * NativeKvCache.blockBytes(cfg, blockSize, dtype))
      throw new Error(`kv cache: native size ${this.bytes} bytes differs from ${blocks} blocks × ${NativeKvCache.blockBytes(cfg, blockSize, dtype)}`);
  }
  /** Releases the cache's memory now rather than at garbage collection (a step in flight keeps it until it ends);
   * the cache is unusable after. */
  free(): void {
    addon.kvFree(this.handle);
  }
  /** Stored contents of one block of one layer as f32 (bf16 widened exactly): k, v (blockSize, kvHeads·headDim). Call between steps. */
  readBlock(layer: number, block: number): { k: Float32Array; v: Float32Array } {
    return addon.kvReadBlock(this.handle, layer, block) as { k: Float32Array; v: Float32Array };
  }
  /** Bytes one block takes (K and V, every layer): 4 bytes per element in f32, 2 in bf16. */
  static blockBytes(cfg: DecoderConfig, blockSize: number, dtype: KvDtype = 'f32'): number {
    return cfg.numLayers * blockSize * cfg.numKvHeads * cfg.headDim * (dtype === 'bf16' ? 2 : 4) * 2;
  }
}

export class NativeDecoder {
  readonly handle: unknown;
  readonly config: DecoderConfig;
  readonly weightDtype: 'F32' | 'BF16';
  weightBytes = 0;

  constructor(config: DecoderConfig, weightDtype: 'F32' | 'BF16') {
    this.config = config;
    this.weightDtype = weightDtype;
    const rs = config.ropeScaling;
    this.handle = addon.llamaCreate({
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
      slidingWindow: config.slidingWindow ?? 0,
      ropeScaling: {
        type: rs.type === 'llama3' ? 1 : rs.type === 'linear' ? 2 : 0,
        factor: rs.factor,
        lowFreqFactor: rs.lowFreqFactor,
        highFreqFactor: rs.highFreqFactor,
        originalMaxPosition: rs.originalMaxPosition,
      },
      weightDtype,
    });
  }

  async loadWeights(weights: NativeWeight[], finalize = false): Promise<void> {
    const r = (await addon.llamaLoadWeights(this.handle, weights, finalize)) as { weightBytes: number };
    this.weightBytes = r.weightBytes;
  }

  /** Adapter ids loaded natively. */
  readonly adapters = new Set<number>();

  /** `dtype`: how A and B are kept natively (bf16: rounded to nearest even, half the bytes; fp32 math either way). */
  loadAdapter(id: number, modules: NativeLoraModule[], dtype: 'f32' | 'bf16' = 'f32'): void {
    addon.llamaAdapterLoad(this.handle, id, modules, dtype);
    this.adapters.add(id);
  }

  /** Releases the weights and adapters now rather than at garbage collection (a step or load in flight keeps them
   * until it ends); every later call fails with "model handle is invalid". */
  free(): void {
    this.adapters.clear();
    addon.llamaFree(this.handle);
  }

  unloadAdapter(id: number): boolean {
    this.adapters.delete(id);
    return addon.llamaAdapterUnload(this.handle, id) as boolean;
  }

  /** Runs one step; `out` receives outRows.length × (vocab | hidden) floats. */
  step(kv: NativeKvCache, batch: StepBatch, out: Float32Array): Promise<void> {
    return addon.llamaStep(this.handle, kv.handle, batch, out) as Promise<void>;
  }
}
