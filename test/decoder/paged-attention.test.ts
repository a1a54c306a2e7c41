// Prefill attention (tiles of query tokens over chunks of keys, online softmax) against the
// per-token decode kernel on the same weights: a long prompt run as one prefill chunk must give the
// logits of the same prompt fed one token per step, for GQA and MHA models, with and without a
// sliding window, and when the prompt starts mid-block after a cached prefix.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
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
// context into parts (at least 256 keys each) computed on different threads and merged (flash-decoding).
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
