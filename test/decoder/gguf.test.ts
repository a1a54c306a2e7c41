// GGUF decoders: the tiny goldens converted to GGUF (F32, F16, Q8_0) by src/formats/gguf.ts load into
// the native model and reproduce the reference logits (F32 exactly within 1e-4; F16/Q8_0 within their
// rounding) and greedy continuations.
import t from 'tap';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, goldens, maxAbs, readCases } from './helpers.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-gguf-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));

for (const name of ['llama-tiny', 'qwen2-tiny']) {
  const dir = join(goldens, name);
  const cases = readCases(dir);
  const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
  copyFileSync(join(dir, 'tokenizer.json'), join(tmp, 'tokenizer.json'));
  for (const [outType, tol] of [['F32', 1e-4], ['F16', 0.05], ['Q8_0', 0.5]] as const) {
    t.test(`${name} as GGUF ${outType}`, async (t) => {
      const path = join(tmp, `${name}.${outType}.gguf`);
      convertHfToGguf(dir, path, { outType });
      const m = await loadDecoder(path, { kv: { memory: '4MiB' } });
      t.equal(m.config.numLayers, 2);
      let worst = 0;
      for (const p of cases.prompts) {
        const [got] = await forwardAll(m.native, m.config, [p.input_ids]);
        worst = Math.max(worst, maxAbs(got, expected.float32(p.logits_key)));
      }
      t.ok(worst <= tol, `logits max abs ${worst.toExponential(2)} <= ${tol}`);
      if (outType === 'F32') {
        const p = cases.prompts[3];
        const r = await m.generate({ prompt_ids: p.input_ids, max_tokens: 16, temperature: 0, stop_at_eos: false }).result;
        t.same(r.tokenIds, p.greedy.new_ids, 'greedy continuation');
      }
    });
  }
}
