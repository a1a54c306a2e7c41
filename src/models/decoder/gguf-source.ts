// GGUF decoders (llama.cpp / Ollama files) as a TensorSource for the native loader: tensors come from
// src/formats/gguf-hf.ts (loadGgufCheckpoint) under Hugging Face names (Llama q/k rows un-permuted there);
// F32/F16/BF16 are used as stored; Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and Q8_K embedding / linear
// weights are handed over as stored (`raw`) and kept block-quantized by the native decoder; the other block types
// (Q2_K, Q3_K) are dequantized to F32 at load time (and rounded to bf16 when the model keeps bf16).
//
// Tokenizer: a tokenizer.json in `tokenizerDir` or in the file's folder (with the tokenizer_config.json /
// generation_config.json beside it) is used when present, as for a model folder. Otherwise the vocabulary
// embedded in the GGUF metadata is rebuilt as a tokenizer.json (src/formats/gguf-tokenizer.ts): byte-level BPE
// ("gpt2") and SentencePiece ("llama") files; its chat template (tokenizer.chat_template), BOS/EOS and
// add_bos_token come from the metadata too. What the metadata leaves open (e.g. an unknown pre-tokenizer name)
// is reported as a process warning and in `tokenizerNotes`.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { DecoderConfig, GenerationConfig } from '../../formats/hf-config.ts';
import {
  canDequantize, dequantize, dequantizeAsync, GgmlType, ggmlTypeName, GgufError, unsupportedTypeError, type GgufTensorInfo,
} from '../../formats/gguf.ts';
import { loadGgufCheckpoint } from '../../formats/gguf-hf.ts';
import { loadGgufTokenizer } from '../../formats/gguf-tokenizer.ts';
import { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { TensorSource } from './loader.ts';
import type { QuantDtype } from './native-model.ts';

const DTYPE: Partial<Record<GgmlType, 'F32' | 'F16' | 'BF16'>> = { [GgmlType.F32]: 'F32', [GgmlType.F16]: 'F16', [GgmlType.BF16]: 'BF16' };
/** Block types the native decoder keeps quantized (its int8 kernels: native/kernels/quant*.cc). */
export const KEPT_QUANT: Partial<Record<GgmlType, QuantDtype>> = {
  [GgmlType.Q4_0]: 'Q4_0', [GgmlType.Q4_1]: 'Q4_1', [GgmlType.Q5_0]: 'Q5_0', [GgmlType.Q5_1]: 'Q5_1',
  [GgmlType.Q8_0]: 'Q8_0', [GgmlType.Q4_K]: 'Q4_K', [GgmlType.Q5_K]: 'Q5_K', [GgmlType.Q6_K]: 'Q6_K',
  [GgmlType.Q8_K]: 'Q8_K',
};

/**
 * GGUF tensors as a TensorSource. Block-quantized tensors (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, Q8_K: what llama.cpp / Ollama's Q4_K_M, Q5_K_M, Q6_K, Q8_0 ... files hold) are dequantized to
 * F32 by the native core when the loader asks for them, off the event loop through getAsync (get does the
 * same on the calling thread). A file with any tensor of another type (IQ*, TQ*, MXFP4, ...) is refused
 * here, before anything loads, with a GgufError naming those tensors and their types.
 */
export function ggufTensorSource(tensors: Map<string, GgufTensorInfo>, tied: boolean): TensorSource {
  const bad = [...tensors.values()].filter((t) => !canDequantize(t.type));
  if (bad.length) {
    const err = unsupportedTypeError(bad[0].name, bad[0].type);
    const more = bad.length > 1 ? `; ${bad.length - 1} more: ${bad.slice(1, 6).map((t) => `${t.name} (${ggmlTypeName(t.type)})`).join(', ')}${bad.length > 6 ? ', ...' : ''}` : '';
    throw new GgufError(err.message + more);
  }
  const find = (name: string) => {
    const t = tensors.get(name);
    if (!t) throw new Error(`GGUF has no tensor for ${name}`);
    return t;
  };
  const asF32 = (t: GgufTensorInfo, f: Float32Array) => ({ dtype: 'F32', shape: t.shape, bytes: new Uint8Array(f.buffer, f.byteOffset, f.byteLength) });
  return {
    has: (name) => tensors.has(name) && !(tied && name === 'lm_head.weight'),
    dtype: (name) => DTYPE[find(name).type] ?? 'F32',
    quantized: (name) => !DTYPE[find(name).type],
    raw: (name) => {
      const t = find(name);
      const dtype = KEPT_QUANT[t.type];
      return dtype && t.shape.length === 2 ? { dtype, shape: t.shape, bytes: t.bytes } : undefined;
    },
    get: (name) => {
      const t = find(name);
      const dtype = DTYPE[t.type];
      return dtype ? { dtype, shape: t.shape, bytes: t.bytes } : asF32(t, dequantize(t));
    },
    getAsync: async (name) => {
      const t = find(name);
      const dtype = DTYPE[t.type];
      return dtype ? { dtype, shape: t.shape, bytes: t.bytes } : asF32(t, await dequantizeAsync(t));
    },
  };
}

export interface OpenedGgufDecoder {
  config: DecoderConfig;
  generation: GenerationConfig;
  tokenizer: Tokenizer;
  source: TensorSource;
  /** Where the tokenizer came from: the folder of the tokenizer.json used, or 'embedded'. */
  tokenizerFrom: string;
  /** Assumptions made rebuilding an embedded vocabulary (empty otherwise). */
  tokenizerNotes: string[];
}

export async function openGgufDecoder(path: string, opts: { tokenizerDir?: string } = {}): Promise<OpenedGgufDecoder> {
  if (opts.tokenizerDir !== undefined && !existsSync(join(opts.tokenizerDir, 'tokenizer.json')))
    throw new Error(`${opts.tokenizerDir}: no tokenizer.json there (tokenizerDir is optional: without it the GGUF's own vocabulary is used)`);
  const ck = loadGgufCheckpoint(path);
  const c = ck.config;
  const dir = [opts.tokenizerDir, dirname(path)].find((d): d is string => !!d && existsSync(join(d, 'tokenizer.json')));
  const generation: GenerationConfig = {
    temperature: 1, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, doSample: false,
    eosTokenIds: c.eosTokenIds, bosTokenId: c.bosTokenId, padTokenId: c.padTokenId, maxNewTokens: null,
  };
  if (dir) {
    const tokenizer = await Tokenizer.fromDir(dir);
    return { config: c, generation, tokenizer, source: ggufTensorSource(ck.tensors, ck.tied), tokenizerFrom: dir, tokenizerNotes: [] };
  }
  const { tokenizer, parts } = loadGgufTokenizer(ck.file.metadataObject(), path);
  for (const note of parts.notes) process.emitWarning(`${path}: ${note}`, { code: 'LOOM_GGUF_TOKENIZER' });
  const g = parts.generationConfig;
  generation.eosTokenIds = [...new Set([...c.eosTokenIds, ...g.eos_token_id])];
  generation.bosTokenId = g.bos_token_id ?? c.bosTokenId;
  generation.padTokenId = g.pad_token_id ?? c.padTokenId;
  return { config: c, generation, tokenizer, source: ggufTensorSource(ck.tensors, ck.tied), tokenizerFrom: 'embedded', tokenizerNotes: parts.notes };
}
