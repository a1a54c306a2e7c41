// GGUF decoders (llama.cpp / Ollama files) as a TensorSource for the native loader: tensors come
// from src/formats/gguf.ts under Hugging Face names (Llama q/k rows un-permuted there); F32/F16/BF16
// are used as stored, quantized types (Q8_0, ...) are dequantized to F32 at load time (and rounded
// to bf16 when the model keeps bf16). The tokenizer is read from a tokenizer.json next to the file
// (`<file>.tokenizer.json`, or tokenizer.json in the same folder / the folder given as `tokenizerDir`).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { DecoderConfig, GenerationConfig } from '../../formats/hf-config.ts';
import { dequantize, GgmlType, loadGgufCheckpoint, type GgufTensorInfo } from '../../formats/gguf.ts';
import { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { TensorSource } from './loader.ts';
import { canDequantize, dequantizeAsync, GgufError, ggmlTypeName, unsupportedTypeError } from '../../formats/gguf.ts';

const DTYPE: Partial<Record<GgmlType, 'F32' | 'F16' | 'BF16'>> = { [GgmlType.F32]: 'F32', [GgmlType.F16]: 'F16', [GgmlType.BF16]: 'BF16' };

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

export async function openGgufDecoder(path: string, opts: { tokenizerDir?: string } = {}): Promise<{ config: DecoderConfig; generation: GenerationConfig; tokenizer: Tokenizer; source: TensorSource }> {
  const ck = loadGgufCheckpoint(path);
  const candidates = [opts.tokenizerDir, dirname(path)].filter((d): d is string => !!d && existsSync(join(d, 'tokenizer.json')));
  if (!candidates.length)
    throw new Error(`${path}: loading a GGUF decoder needs the model's tokenizer.json next to the file (or tokenizerDir); GGUF-embedded vocabularies are not read yet`);
  const tokenizer = await Tokenizer.fromDir(candidates[0]);
  const c = ck.config;
  const generation: GenerationConfig = {
    temperature: 1, topP: 1, topK: 0, minP: 0, repetitionPenalty: 1, doSample: false,
    eosTokenIds: c.eosTokenIds, bosTokenId: c.bosTokenId, padTokenId: c.padTokenId, maxNewTokens: null,
  };
  return { config: c, generation, tokenizer, source: ggufTensorSource(ck.tensors, ck.tied) };
}
