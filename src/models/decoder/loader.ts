// Loads a Llama-family checkpoint (Hugging Face directory with config.json + *.safetensors, or
// any tensor source using Hugging Face tensor names, e.g. a GGUF file mapped by src/formats/gguf-hf.ts)
// into the native decoder. q/k/v and gate/up are concatenated so each layer runs 4 packed GEMMs.
import { loadDecoderConfig, type DecoderConfig } from '../../formats/hf-config.ts';
import { SafetensorsCheckpoint, type TensorInfo } from '../../formats/safetensors.ts';
import { NativeDecoder, QUANT_DTYPES, type NativeWeight, type WeightDtype } from './native-model.ts';

/** A source of Hugging Face–named tensors (SafetensorsCheckpoint fits; GGUF readers adapt to it). */
export interface TensorSource {
  has(name: string): boolean;
  get(name: string): { dtype: string; shape: number[]; bytes: Uint8Array };
  /** Optional: the dtype `get` would return, without producing the tensor (GGUF: dequantizing is costly). */
  dtype?(name: string): string;
  /** Optional: true when the tensor is stored quantized (GGUF Q4_K, ...) and `get` dequantizes it. */
  quantized?(name: string): boolean;
  /** Optional: `get` without blocking the event loop (GGUF: dequantization runs off the main thread). */
  getAsync?(name: string): Promise<{ dtype: string; shape: number[]; bytes: Uint8Array }>;
  /** Optional: the tensor as stored when the native decoder keeps its type block-quantized (GGUF Q4_0 ... Q8_K,
   * QUANT_DTYPES: dtype 'Q4_K' etc., bytes the rows of blocks); undefined otherwise (then `get` it). */
  raw?(name: string): { dtype: string; shape: number[]; bytes: Uint8Array } | undefined;
}

export interface LoadOptions {
  /** How linear weights are kept: 'f32', 'bf16' (half the memory; fp32 compute), or 'auto' (bf16 if stored bf16
   * or quantized: rounding a dequantized Q4/Q8 weight to bf16 adds ~0.2% relative error, far below the
   * quantization's own, and a 7B Q4_K_M file kept as f32 would take ~27 GB). */
  dtype?: 'f32' | 'bf16' | 'auto';
}

export class DecoderLoadError extends Error {
  override name = 'DecoderLoadError';
}

/** The dtypes the native loader takes: F32, F16, BF16, and rows of blocks of the kept quantized types (QUANT_DTYPES)
 * for the embedding and linear weights (other quantized types are dequantized before they get here). */
function weightDtype(name: string, dtype: string): WeightDtype {
  if (dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16' && !(QUANT_DTYPES as readonly string[]).includes(dtype))
    throw new DecoderLoadError(
      `tensor for ${name} has dtype ${dtype}; expected F32, F16, BF16, ${QUANT_DTYPES.join(', ')}`);
  return dtype as WeightDtype;
}

function asWeight(name: string, t: { dtype: string; shape: number[]; bytes: Uint8Array }, rows: number, cols: number): NativeWeight {
  const dtype = weightDtype(name, t.dtype);
  const n = t.shape.reduce((a, b) => a * b, 1);
  if (n !== rows * cols)
    throw new DecoderLoadError(`tensor for ${name} has shape ${JSON.stringify(t.shape)}, expected [${rows}, ${cols}]`);
  return { name, dtype, data: t.bytes, rows, cols };
}

/** Tensors joined along rows; the native loader joins the parts in its worker, or, when their dtypes differ (a
 * Q4_K_M file's q, k in Q4_K and v in Q6_K), packs each part as stored and stacks them. */
function concatRows(name: string, parts: { dtype: string; shape: number[]; bytes: Uint8Array }[], cols: number): NativeWeight {
  const dtype = parts[0].dtype;
  let rows = 0;
  for (const p of parts) {
    const n = p.shape.reduce((a, b) => a * b, 1);
    if (n % cols !== 0) throw new DecoderLoadError(`${name}: part of shape ${JSON.stringify(p.shape)} is not (rows, ${cols})`);
    rows += n / cols;
  }
  const w: NativeWeight = { name, dtype: weightDtype(name, dtype), data: parts.map((p) => p.bytes), rows, cols };
  if (parts.some((p) => p.dtype !== dtype)) w.dtypes = parts.map((p) => weightDtype(name, p.dtype));
  return w;
}

/** Picks the dtype the native model keeps its linear weights in. */
function keepDtype(src: TensorSource, opt: LoadOptions['dtype']): 'F32' | 'BF16' {
  if (opt === 'bf16') return 'BF16';
  if (opt === 'f32') return 'F32';
  const probe = ['model.layers.0.self_attn.q_proj.weight', 'model.layers.0.mlp.down_proj.weight'].find((n) => src.has(n));
  if (probe && src.quantized?.(probe)) return 'BF16';
  return probe && (src.dtype ? src.dtype(probe) : src.get(probe).dtype) === 'BF16' ? 'BF16' : 'F32';
}

/** Builds the native decoder from `config` and a tensor source. */
export async function buildNativeDecoder(config: DecoderConfig, src: TensorSource, opts: LoadOptions = {}): Promise<NativeDecoder> {
  const c = config;
  const D = c.hiddenSize;
  const model = new NativeDecoder(c, keepDtype(src, opts.dtype));
  // getAsync when the source has it (GGUF: dequantizing a layer's weights runs off the event loop)
  const read = async (name: string) => (src.getAsync ? src.getAsync(name) : src.get(name));
  const need = (name: string) => {
    if (!src.has(name)) throw new DecoderLoadError(`checkpoint is missing tensor ${name}`);
    return read(name);
  };
  // embedding / linear weights: block-quantized as stored where the native decoder keeps the type (QUANT_DTYPES)
  const keep = (name: string) => (src.has(name) && src.raw?.(name)) || need(name);
  // parts of one fused weight (q;k;v, gate;up): each kept as stored where its type is kept (the types may differ)
  const keepAll = (names: string[]) => Promise.all(names.map(keep));
  // Embeddings / output projection. Tied models may store either name (tinystories-656k stores only lm_head.weight).
  const embName = src.has('model.embed_tokens.weight') ? 'model.embed_tokens.weight' : src.has('lm_head.weight') && c.tieWordEmbeddings ? 'lm_head.weight' : null;
  if (!embName) throw new DecoderLoadError('checkpoint is missing tensor model.embed_tokens.weight');
  const head: NativeWeight[] = [
    asWeight('embed', await keep(embName), c.vocabSize, D), asWeight('norm', await need('model.norm.weight'), 1, D),
  ];
  if (!c.tieWordEmbeddings) {
    if (!src.has('lm_head.weight')) throw new DecoderLoadError('checkpoint is missing tensor lm_head.weight (tie_word_embeddings is false)');
    head.push(asWeight('lm_head', await keep('lm_head.weight'), c.vocabSize, D));
  }
  await model.loadWeights(head);
  const Nq = c.numHeads * c.headDim;
  const Nkv = c.numKvHeads * c.headDim;
  for (let i = 0; i < c.numLayers; i++) {
    const p = `model.layers.${i}.`;
    const w: NativeWeight[] = [
      asWeight(`layers.${i}.attn_norm`, await need(p + 'input_layernorm.weight'), 1, D),
      asWeight(`layers.${i}.mlp_norm`, await need(p + 'post_attention_layernorm.weight'), 1, D),
      concatRows(`layers.${i}.qkv`, await keepAll(['q', 'k', 'v'].map((x) => `${p}self_attn.${x}_proj.weight`)), D),
      asWeight(`layers.${i}.o`, await keep(p + 'self_attn.o_proj.weight'), D, Nq),
      concatRows(`layers.${i}.gate_up`, await keepAll([p + 'mlp.gate_proj.weight', p + 'mlp.up_proj.weight']), D),
      asWeight(`layers.${i}.down`, await keep(p + 'mlp.down_proj.weight'), D, c.intermediateSize),
    ];
    if (c.attentionBias) {
      const b = concatRows(`layers.${i}.qkv_bias`, [await need(p + 'self_attn.q_proj.bias'), await need(p + 'self_attn.k_proj.bias'), await need(p + 'self_attn.v_proj.bias')], 1);
      w.push({ ...b, rows: 1, cols: Nq + 2 * Nkv });
    }
    await model.loadWeights(w, i === c.numLayers - 1);
  }
  return model;
}

/**
 * Loads a Hugging Face checkpoint directory. `weightsFile` overrides which safetensors file is read
 * (e.g. the goldens' model.bf16.safetensors).
 */
export async function loadHfDecoder(dir: string, opts: LoadOptions & { weightsFile?: string } = {}): Promise<{ model: NativeDecoder; config: DecoderConfig; source: SafetensorsCheckpoint }> {
  const config = loadDecoderConfig(dir);
  const source = SafetensorsCheckpoint.open(opts.weightsFile ?? dir);
  const model = await buildNativeDecoder(config, source as unknown as TensorSource, opts);
  return { model, config, source };
}

export type { TensorInfo };
