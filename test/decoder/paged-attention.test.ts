// Prefill attention (tiles of query tokens over chunks of keys, online softmax) against the
// per-token decode kernel on the same weights: a long prompt run as one prefill chunk must give the
// logits of the same prompt fed one token per step, for GQA and MHA models, with and without a
// sliding window, and when the prompt starts mid-block after a cached prefix.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig, parseDecoderConfig, type DecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint } from '../../src/formats/safetensors.ts';
import { buildNativeDecoder, type TensorSource } from '../../src/models/decoder/loader.ts';
import { goldens, maxAbs, randomIds, runChunks } from './helpers.ts';

const TOL = 2e-4;

for (const name of ['qwen2-tiny', 'mistral-tiny', 'llama-tiny']) {
  for (const window of [0, 8, 37]) {
    t.test(`${name}${window ? ` window ${window}` : ''}: 90-token prefill chunk = token-by-token decode`, async (t) => {
      const dir = join(goldens, name);
      const cfg = { ...loadDecoderConfig(dir), slidingWindow: window };
      const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
      const ids = randomIds(90, cfg.vocabSize, 7 + window);
      const oneByOne = await runChunks(model, cfg, ids, ids.map(() => 1));
      const chunk = await runChunks(model, cfg, ids, [90]);
      t.ok(maxAbs(chunk, oneByOne) <= TOL, `one chunk: max abs ${maxAbs(chunk, oneByOne).toExponential(2)}`);
      // a prefix already in the cache, then the rest in uneven chunks starting mid-block
      const mixed = await runChunks(model, cfg, ids, [21, 1, 33, 35]);
      t.ok(maxAbs(mixed, oneByOne) <= TOL, `chunks 21+1+33+35: max abs ${maxAbs(mixed, oneByOne).toExponential(2)}`);
      if (window) {
        const full = await buildNativeDecoder({ ...cfg, slidingWindow: 0 }, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
        const ref = await runChunks(full, cfg, ids, [90]);
        const V = cfg.vocabSize;
        t.ok(maxAbs(chunk.subarray(window * V), ref.subarray(window * V)) > 1e-3, 'the window is applied (later positions differ from full attention)');
      }
    });
  }
}

// Decode over a long context: with one sequence a step has few work items, so attention splits the
// context into parts (at least 32 keys each) computed on different threads and merged (flash-decoding).
// The last 60 tokens fed one per step must give the logits of the same prompt run as one prefill
// chunk (the tiled kernel, an independent path), with and without a sliding window, f32 and bf16 KV. The window
// (800 keys, 128 products each on these goldens: 102K) stays well above the context under which a decode step's
// attention runs on the calling thread instead (kAttnSerialMacs, native/models/llama.cc: 64K products).
for (const name of ['qwen2-tiny', 'llama-tiny']) {
  for (const window of [0, 800]) {
    t.test(`${name}${window ? ` window ${window}` : ''}: decode at 1,100 tokens of context (split across threads) = prefill`, async (t) => {
      const dir = join(goldens, name);
      const cfg = { ...loadDecoderConfig(dir), slidingWindow: window, maxPositionEmbeddings: 2048 };
      const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
      const N = 1100, tail = 60;
      const ids = randomIds(N, cfg.vocabSize, 11 + window);
      const V = cfg.vocabSize;
      const chunk = await runChunks(model, cfg, ids, [N]);
      const steps = await runChunks(model, cfg, ids, [N - tail, ...Array.from({ length: tail }, () => 1)]);
      const err = maxAbs(steps.subarray((N - tail) * V), chunk.subarray((N - tail) * V));
      t.ok(err <= TOL, `last ${tail} positions, one per step vs one chunk: max abs ${err.toExponential(2)}`);
    });
  }
}

// The decode kernel over shapes the goldens lack: 7 query heads per KV head (passes of 4 and 3 query heads on AVX2,
// one on AVX-512), a head size of 20 (a scalar tail after the vectors of every ISA) and a context of 300 keys
// (chunks of 16 keys that start mid-block, parts on different threads). Random weights; the reference is the same
// prompt run as one prefill chunk (the tiled kernel), f32 and bf16 KV, with and without a sliding window.
function randomSource(cfg: DecoderConfig, seed: number): TensorSource {
  const D = cfg.hiddenSize, Dh = cfg.headDim, F = cfg.intermediateSize, V = cfg.vocabSize;
  const shapes = new Map<string, number[]>([['model.embed_tokens.weight', [V, D]], ['model.norm.weight', [D]],
    ['lm_head.weight', [V, D]]]);
  for (let i = 0; i < cfg.numLayers; i++) {
    const p = `model.layers.${i}.`;
    shapes.set(p + 'input_layernorm.weight', [D]).set(p + 'post_attention_layernorm.weight', [D]);
    const Nq = cfg.numHeads * Dh, Nkv = cfg.numKvHeads * Dh;
    shapes.set(p + 'self_attn.q_proj.weight', [Nq, D]).set(p + 'self_attn.o_proj.weight', [D, Nq]);
    shapes.set(p + 'self_attn.k_proj.weight', [Nkv, D]).set(p + 'self_attn.v_proj.weight', [Nkv, D]);
    shapes.set(p + 'mlp.gate_proj.weight', [F, D]).set(p + 'mlp.up_proj.weight', [F, D]);
    shapes.set(p + 'mlp.down_proj.weight', [D, F]);
  }
  let s = seed >>> 0;
  const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  return {
    has: (name) => shapes.has(name),
    get: (name) => {
      const shape = shapes.get(name)!;
      const x = new Float32Array(shape.reduce((a, b) => a * b, 1));
      // norms near 1; q and k larger than the rest so that the softmax is far from uniform
      const amp = name.endsWith('norm.weight') ? 0 : /[qk]_proj/.test(name) ? 0.6 : 0.15;
      for (let i = 0; i < x.length; i++) x[i] = name.endsWith('norm.weight') ? 1 + 0.1 * rand() : amp * rand();
      return { dtype: 'F32', shape, bytes: new Uint8Array(x.buffer) };
    },
  };
}

for (const window of [0, 120]) {
  const name = `7 query heads per KV head, head size 20${window ? `, window ${window}` : ''}`;
  t.test(`${name}: decode at 300 keys = prefill`, async (t) => {
    const cfg = parseDecoderConfig({
      model_type: 'llama', hidden_size: 64, intermediate_size: 96, num_hidden_layers: 2, num_attention_heads: 14,
      num_key_value_heads: 2, head_dim: 20, vocab_size: 211, max_position_embeddings: 512, rms_norm_eps: 1e-5,
      sliding_window: window || undefined, tie_word_embeddings: false,
    });
    t.equal(cfg.headDim, 20);
    const model = await buildNativeDecoder({ ...cfg, slidingWindow: window }, randomSource(cfg, 5));
    const N = 300, tail = 40, V = cfg.vocabSize;
    const ids = randomIds(N, V, 3 + window);
    for (const dtype of ['f32', 'bf16'] as const) {
      const chunk = await runChunks(model, cfg, ids, [N], dtype);
      const steps = await runChunks(model, cfg, ids, [N - tail, ...Array.from({ length: tail }, () => 1)], dtype);
      const err = maxAbs(steps.subarray((N - tail) * V), chunk.subarray((N - tail) * V));
      t.ok(err <= TOL, `${dtype} KV, last ${tail} positions one per step vs one chunk: max abs ${err.toExponential(2)}`,
      );
      // the logits move with the context (attention is not uniform, so the kernel's weights matter)
      t.ok(maxAbs(chunk.subarray((N - 1) * V), chunk.subarray((N - 2) * V), V) > 1e-2, 'consecutive positions differ');
    }
  });
}
