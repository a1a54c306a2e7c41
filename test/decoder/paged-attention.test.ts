// Prefill attention (tiles of query tokens over chunks of keys, online softmax) against the
// per-token decode kernel on the same weights: a long prompt run as one prefill chunk must give the
// logits of the same prompt fed one token per step, for GQA and MHA models, with and without a
// sliding window, and when the prompt starts mid-block after a cached prefix.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig, type DecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint } from '../../src/formats/safetensors.ts';
import { buildNativeDecoder, type TensorSource } from '../../src/models/decoder/loader.ts';
import { NativeKvCache, type NativeDecoder } from '../../src/models/decoder/native-model.ts';
import { goldens, maxAbs } from './helpers.ts';

const TOL = 2e-4;
const BS = 16;

function randomIds(n: number, V: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 3 + (s % (V - 3));
  });
}

/** Feeds `ids` in steps of the given sizes (one sequence, fresh cache, shuffled block ids); logits of every row. */
async function run(model: NativeDecoder, cfg: DecoderConfig, ids: number[], chunks: number[]): Promise<Float32Array> {
  const nb = Math.ceil(ids.length / BS);
  const kv = new NativeKvCache(cfg, nb + 3, BS);
  const table = Int32Array.from({ length: nb }, (_, i) => (i * 5 + 2) % (nb + 3)); // blocks out of order
  const V = cfg.vocabSize;
  const out = new Float32Array(ids.length * V);
  let pos = 0;
  for (const n of chunks) {
    const step = new Float32Array(n * V);
    await model.step(kv, {
      tokens: Int32Array.from(ids.slice(pos, pos + n)),
      positions: Int32Array.from({ length: n }, (_, i) => pos + i),
      seqLens: Int32Array.of(n), tables: table, tableOffsets: Int32Array.of(0, nb),
      outRows: Int32Array.from({ length: n }, (_, i) => i),
    }, step);
    out.set(step, pos * V);
    pos += n;
  }
  return out;
}

for (const name of ['qwen2-tiny', 'mistral-tiny', 'llama-tiny']) {
  for (const window of [0, 8, 37]) {
    t.test(`${name}${window ? ` window ${window}` : ''}: 90-token prefill chunk = token-by-token decode`, async (t) => {
      const dir = join(goldens, name);
      const cfg = { ...loadDecoderConfig(dir), slidingWindow: window };
      const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
      const ids = randomIds(90, cfg.vocabSize, 7 + window);
      const oneByOne = await run(model, cfg, ids, ids.map(() => 1));
      const chunk = await run(model, cfg, ids, [90]);
      t.ok(maxAbs(chunk, oneByOne) <= TOL, `one chunk: max abs ${maxAbs(chunk, oneByOne).toExponential(2)}`);
      // a prefix already in the cache, then the rest in uneven chunks starting mid-block
      const mixed = await run(model, cfg, ids, [21, 1, 33, 35]);
      t.ok(maxAbs(mixed, oneByOne) <= TOL, `chunks 21+1+33+35: max abs ${maxAbs(mixed, oneByOne).toExponential(2)}`);
      if (window) {
        const full = await buildNativeDecoder({ ...cfg, slidingWindow: 0 }, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
        const ref = await run(full, cfg, ids, [90]);
        const V = cfg.vocabSize;
        t.ok(maxAbs(chunk.subarray(window * V), ref.subarray(window * V)) > 1e-3, 'the window is applied (later positions differ from full attention)');
      }
    });
  }
}

// Decode over a long context: with one sequence a step has few work items, so attention splits the
// context into parts (at least 256 keys each) computed on different threads and merged (flash-decoding).
// The last 60 tokens fed one per step must give the logits of the same prompt run as one prefill
// chunk (the tiled kernel, an independent path), with and without a sliding window, f32 and bf16 KV.
for (const name of ['qwen2-tiny', 'llama-tiny']) {
  for (const window of [0, 600]) {
    t.test(`${name}${window ? ` window ${window}` : ''}: decode at 1,100 tokens of context (split across threads) = prefill`, async (t) => {
      const dir = join(goldens, name);
      const cfg = { ...loadDecoderConfig(dir), slidingWindow: window, maxPositionEmbeddings: 2048 };
      const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
      const N = 1100, tail = 60;
      const ids = randomIds(N, cfg.vocabSize, 11 + window);
      const V = cfg.vocabSize;
      const chunk = await run(model, cfg, ids, [N]);
      const steps = await run(model, cfg, ids, [N - tail, ...Array.from({ length: tail }, () => 1)]);
      const err = maxAbs(steps.subarray((N - tail) * V), chunk.subarray((N - tail) * V));
      t.ok(err <= TOL, `last ${tail} positions, one per step vs one chunk: max abs ${err.toExponential(2)}`);
    });
  }
}
