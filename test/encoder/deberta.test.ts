// DeBERTa-v2/v3 encoder forward vs the reference (transformers DebertaV2Model) goldens:
// ../shared/goldens/deberta-v2-tiny (len7, len33 with hidden states, len600 beyond 512, padded batch,
// relative position buckets), on every ISA this CPU supports, fp32 and bf16 weights.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsCheckpoint, SafetensorsFile } from '../../src/formats/safetensors.ts';
import { DebertaEncoder, parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { forEachIsa } from '../../src/native/cpu.ts';

const dir = join(import.meta.dirname, '../../../shared/goldens/deberta-v2-tiny');
const cases = JSON.parse(readFileSync(join(dir, 'cases.json'), 'utf8'));
const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
const ckpt = SafetensorsCheckpoint.open(dir);
const config = parseDebertaConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));

function maxDiff(a: Float32Array, b: Float32Array, mask?: number[], D = 64): number {
  let m = 0;
  for (let i = 0; i < b.length; i++) {
    if (mask && !mask[Math.floor(i / D)]) continue;
    m = Math.max(m, Math.abs(a[i] - b[i]));
  }
  return m;
}

t.test('relative position buckets', async (t) => {
  const enc = await DebertaEncoder.load(ckpt, config);
  for (const r of cases.relative_position_buckets) t.equal(enc.relIndex(r.rel), r.index_into_rel_embeddings, `rel ${r.rel}`);
});

for (const dtype of ['f32', 'bf16'] as const) {
  t.test(`forward (${dtype} weights)`, async (t) => {
    const enc = await DebertaEncoder.load(ckpt, config, '', { dtype });
    // bf16 weights: compared against the fp32 reference with a loose bound (weights rounded to 8 bits).
    const tol = dtype === 'f32' ? 1e-4 : 0.1;
    await forEachIsa(async (isa) => {
      for (const c of cases.cases) {
        const N = c.input_ids.length;
        const ids = Int32Array.from(c.input_ids);
        const mask = new Uint8Array(N).fill(1);
        const out = await enc.forward(ids, mask, 1, N);
        const d = maxDiff(out, expected.float32(c.last_hidden_state_key));
        t.ok(d <= tol, `${isa} ${c.name}: max abs diff ${d.toExponential(2)}`);
        if (c.hidden_states_keys && dtype === 'f32') {
          const hs = await enc.forwardHiddenStates(ids, mask, 1, N);
          c.hidden_states_keys.forEach((k: string, i: number) => {
            const e = expected.float32(k);
            const dd = maxDiff(hs.subarray(i * N * 64, (i + 1) * N * 64), e);
            t.ok(dd <= tol, `${isa} ${k}: ${dd.toExponential(2)}`);
          });
        }
      }
      const b = cases.batch;
      const [B, N] = [b.input_ids.length, b.input_ids[0].length];
      const out = await enc.forward(Int32Array.from(b.input_ids.flat()), Uint8Array.from(b.attention_mask.flat()), B, N);
      const d = maxDiff(out, expected.float32(b.last_hidden_state_key), b.attention_mask.flat());
      t.ok(d <= tol, `${isa} padded batch: ${d.toExponential(2)}`);
    });
  });
}

t.test('bad input is rejected, not a crash', async (t) => {
  const enc = await DebertaEncoder.load(ckpt, config);
  await t.rejects(enc.forward(Int32Array.from([5, 1000000]), new Uint8Array([1, 1]), 1, 2), /out of range/);
  t.throws(() => enc.forward(Int32Array.from([5]), new Uint8Array([1, 1]), 1, 2), /ids/);
});
