// GGUF decoders (llama.cpp / Ollama files) as a TensorSource for the native loader: tensors come
// from src/formats/gguf.ts under Hugging Face names (Llama q/k rows un-permuted there); F32/F16/BF16
// are used as stored, quantized types (Q8_0, ...) are dequantized to F32 at load time (and rounded
// to bf16 when the model keeps bf16).
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
import { dequantize, GgmlType, loadGgufCheckpoint, type GgufTensorInfo } from '../../formats/gguf.ts';
import { loadGgufTokenizer } from '../../formats/gguf-tokenizer.ts';
import { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { TensorSource } from './loader.ts';

const DTYPE: Partial<Record<GgmlType, 'F32' | 'F16' | 'BF16'>> = { [GgmlType.F32]: 'F32', [GgmlType.F16]: 'F16', [GgmlType.BF16]: 'BF16' };

export function ggufTensorSource(tensors: Map<string, GgufTensorInfo>, tied: boolean): TensorSource {
  const get = (name: string) => {
    const t = tensors.get(name);
    if (!t) throw new Error(`GGUF has no tensor for ${name}`);
    const dtype = DTYPE[t.type];
    if (dtype) return { dtype, shape: t.shape, bytes: t.bytes };
    const f = dequantize(t);
    return { dtype: 'F32', shape: t.shape, bytes: new Uint8Array(f.buffer, f.byteOffset, f.byteLength) };
  };
  return {
    has: (name) => tensors.has(name) && !(tied && name === 'lm_head.weight'),
    get,
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
