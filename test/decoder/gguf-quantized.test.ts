// GGUF Q8_0 weights kept block-quantized (native/kernels/quant*.cc): TinyStories-656k converted by Loom's
// own converter to F16 and to Q8_0. The Q8_0 model keeps its blocks (resident weight bytes within 10% of the
// file's tensor bytes) and its greedy decoding follows the F16 run wherever the F16 margin between the best
// and second-best logit exceeds twice the measured Q8_0-vs-F16 logit difference (so quantization cannot flip
// the choice there). A LoRA adapter applies on top of the quantized layers (the lora-grad golden's PEFT adapter).
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgufFile } from '../../src/formats/gguf.ts';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';
import { forwardAll, goldens, maxAbs, readCases, runChunks, shared } from './helpers.ts';

const src = join(shared, 'models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-q8-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
const f16Path = join(tmp, 'f16.gguf'), q8Path = join(tmp, 'q8_0.gguf');
convertHfToGguf(src, f16Path, { outType: 'F16' });
convertHfToGguf(src, q8Path, { outType: 'Q8_0' });
const f16 = await loadDecoder(f16Path, { kv: { memory: '16MiB' } });
const q8 = await loadDecoder(q8Path, { kv: { memory: '16MiB' } });
const cases = readCases(join(goldens, 'tinystories-656k'));
const V = f16.config.vocabSize;

t.test('resident weight bytes of the Q8_0 model are within 10% of the file\'s tensor bytes', async (t) => {
  const file = new GgufFile(q8Path);
  let tensorBytes = 0;
  for (const x of file.tensors.values()) tensorBytes += x.bytes.byteLength;
  const w = q8.info.weightBytes;
  t.ok(Math.abs(w - tensorBytes) <= 0.1 * tensorBytes, `weights ${w} B vs tensors ${tensorBytes} B`);
  const f = f16.info.weightBytes;
  t.ok(w < f / 3, `Q8_0 ${w} B is under a third of the F16 model's ${f} B (kept as f32)`);
});

t.test('greedy Q8_0 decoding follows F16 for 64 tokens where the margin exceeds the quantization error', async (t) => {
  let checked = 0, matched = 0;
  for (const p of cases.prompts as { name: string; input_ids: number[] }[]) {
    const greedy = { prompt_ids: p.input_ids, max_tokens: 64, temperature: 0, stop_at_eos: false };
    const ref = await f16.generate(greedy).result;
    const got = await q8.generate(greedy).result;
    // logits along the F16 trajectory, one token per step (the decode path: int8 activations)
    const ids = [...p.input_ids, ...ref.tokenIds];
    const ones = ids.map(() => 1);
    const a = await runChunks(f16.native, f16.config, ids, ones);
    const b = await runChunks(q8.native, q8.config, ids, ones);
    let diverged = -1;
    for (let i = 0; i < 64; i++) {
      const row = p.input_ids.length - 1 + i;
      let best = -Infinity, second = -Infinity, bestId = -1, qBest = -Infinity, qId = -1, delta = 0;
      for (let v = 0; v < V; v++) {
        const x = a[row * V + v], y = b[row * V + v];
        if (x > best) { second = best; best = x; bestId = v; } else if (x > second) second = x;
        if (y > qBest) { qBest = y; qId = v; }
        delta = Math.max(delta, Math.abs(x - y));
      }
      t.equal(bestId, ref.tokenIds[i], `${p.name} step ${i}: the F16 logits give the F16 token`);
      if (best - second > 2 * delta) {
        checked++;
        if (qId === bestId) matched++;
        else t.fail(`${p.name} step ${i}: Q8_0 picks ${qId}, F16 ${bestId} with margin ${best - second} > 2·${delta}`);
      }
      if (diverged < 0 && got.tokenIds[i] !== ref.tokenIds[i]) {
        diverged = i;
        const m = (best - second).toFixed(4);
        t.ok(best - second <= 2 * delta, `${p.name}: runs part at step ${i}, margin ${m} <= 2·${delta.toFixed(4)}`);
      }
    }
    if (diverged < 0) t.pass(`${p.name}: all 64 greedy tokens equal`);
  }
  t.ok(checked >= 64, `${checked} steps with a margin above the quantization error were checked (${matched} matched)`);
});

t.test('a LoRA adapter applies on top of Q8_0 layers: its logit change matches PEFT\'s', async (t) => {
  const dir = join(goldens, 'lora-grad');
  const lc = readCases(dir);
  const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
  const path = join(tmp, 'llama-tiny-q8_0.gguf');
  convertHfToGguf(join(dir, lc.base_model.dir), path, { outType: 'Q8_0' });  // down_proj (K = 176) stays F16
  const m = await loadDecoder(path, { kv: { memory: '4MiB' } });
  const info = m.loadAdapter('tuned', join(dir, lc.adapter.dir));
  const ids: number[] = lc.sequence.input_ids;
  const [withA, without] = await forwardAll(m.native, m.config, [ids, ids], [info.id, -1]);
  const refWith = expected.float32(lc.expected.logits_key);
  const refWithout = expected.float32(lc.expected.logits_without_adapter_key);
  const got = withA.map((v, i) => v - without[i]), ref = refWith.map((v, i) => v - refWithout[i]);
  const size = maxAbs(ref, new Float32Array(ref.length)), err = maxAbs(got, ref);
  t.ok(size > 0.05, `the adapter moves the logits (max ${size.toFixed(3)})`);
  t.ok(err <= 0.1 * size, `delta on Q8_0 vs PEFT's: max abs ${err.toExponential(2)} <= 10% of ${size.toFixed(3)}`);
});
