// GLiNER2 training graph against PyTorch: count_lstm_v2 heads with mean token pooling and count_lstm
// heads with max token pooling on tiny random checkpoints, and the count_lstm_v2 checkpoint of
// ../shared/goldens/gliner2-tiny-span on its processed combined_schema input (test/fixtures/
// encoder-train-ref/cases.ts). expected.safetensors holds PyTorch's float64 gradient of every tensor
// (transformers' DebertaV2Model + the GLiNER2 library's head modules, make_reference.py); for the
// golden case every k-th element (at most 256 per tensor) and, in expected.json, each tensor's max abs.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { CASES, makeCase } from '../fixtures/encoder-train-ref/cases.ts';

const dir = join(import.meta.dirname, '..', 'fixtures', 'encoder-train-ref');
const expected = JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8'));
const ref = SafetensorsCheckpoint.open(join(dir, 'expected.safetensors'));

for (const name of CASES) {
  t.test(name, async (t) => {
    const c = makeCase(name);
    const g = EncoderTrainGraph.create(c.deberta, c.K, true, c.tensors, null, c.heads);
    g.zeroGrad();
    const out = await g.step(c.batch, { dropNeg: false });
    const want = expected.cases[name].loss;
    for (const k of ['loss', 'span', 'count', 'cls'] as const)
      t.ok(Math.abs(out[k] - want[k]) <= 1e-5 * Math.abs(want[k]) + 1e-6, `${k} ${out[k]} vs PyTorch ${want[k]}`);
    const names = g.params().map((p) => p.name);
    t.equal(names.length, Object.keys(c.tensors).length, 'every checkpoint tensor is a parameter');
    const sampled: Record<string, number> | undefined = expected.cases[name].max_abs;
    let worst = 0;
    for (const n of names) {
      const r = toFloat32(ref.get(`${name}/${n}`));
      const full = g.grad(n);
      const stride = sampled ? Math.max(1, Math.ceil(full.length / 256)) : 1; // make_reference.py sample_stride
      const got = sampled ? full.filter((_, i) => i % stride === 0) : full;
      t.equal(got.length, r.length, `${n}: as many values as the reference`);
      let max = sampled ? sampled[n] : 0;
      let diff = 0;
      if (sampled) {
        let own = 0;
        for (const v of full) own = Math.max(own, Math.abs(v));
        diff = Math.abs(own - max); // the largest gradient element agrees too
      }
      for (let i = 0; i < r.length; i++) {
        if (!sampled) max = Math.max(max, Math.abs(r[i]));
        diff = Math.max(diff, Math.abs(got[i] - r[i]));
      }
      t.ok(max > 0, `${n}: the reference gradient is not zero`);
      worst = Math.max(worst, diff / max);
      if (diff > 1e-4 * max) t.fail(`${n}: max abs diff ${diff.toExponential(2)} > 1e-4 × ${max.toExponential(2)}`);
    }
    t.ok(worst <= 1e-4, `worst per-tensor max abs diff / max abs of the reference: ${worst.toExponential(2)}`);
  });
}
