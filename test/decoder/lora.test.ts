// LoRA at inference: the lora-grad golden's logits with the PEFT adapter applied (§5), several
// adapters (and none) over one base in the same batch, and load/unload at run time.
import t from 'tap';
import { join } from 'node:path';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';
import { AdapterError } from '../../src/runtime/adapters.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, goldens, maxAbs, readCases } from './helpers.ts';

const dir = join(goldens, 'lora-grad');
const cases = readCases(dir);
const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
const ids: number[] = cases.sequence.input_ids;
const model = await loadDecoder(join(dir, cases.base_model.dir), { kv: { memory: '4MiB' } });

t.test('adapter logits match PEFT; base logits unchanged; mixed batch', async (t) => {
  const info = model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  t.equal(info.scale, cases.adapter.scaling);
  const [withA, without, again] = await forwardAll(model.native, model.config, [ids, ids, ids], [info.id, -1, info.id]);
  const dA = maxAbs(withA, expected.float32(cases.expected.logits_key));
  const d0 = maxAbs(without, expected.float32(cases.expected.logits_without_adapter_key));
  t.ok(dA <= 1e-4, `with adapter: max abs ${dA.toExponential(2)}`);
  t.ok(d0 <= 1e-4, `without adapter (same batch): max abs ${d0.toExponential(2)}`);
  t.same(Array.from(again), Array.from(withA), 'second sequence with the adapter agrees');
});

t.test('sequences sharing an adapter side by side (a decode-sized and a prefill-sized run) match PEFT', async (t) => {
  const info = model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  const V = model.config.vocabSize;
  const wantA = expected.float32(cases.expected.logits_key);
  const want0 = expected.float32(cases.expected.logits_without_adapter_key);
  // causal: a prefix's logits are the golden's first rows
  const check = (got: Float32Array[], seqs: number[][], adapters: number[], what: string) => {
    seqs.forEach((s, i) => {
      const ref = (adapters[i] >= 0 ? wantA : want0).subarray(0, s.length * V);
      const d = maxAbs(got[i], ref);
      const kind = adapters[i] >= 0 ? 'adapter' : 'base';
      t.ok(d <= 1e-4, `${what}, sequence ${i} (${kind}): max abs ${d.toExponential(2)}`);
    });
  };
  const small = [ids.slice(0, 4), ids.slice(0, 4), ids.slice(0, 4), ids.slice(0, 6)];
  const smallA = [info.id, info.id, info.id, -1];
  check(await forwardAll(model.native, model.config, small, smallA), small, smallA, 'a 12-row run');
  const large = [ids.slice(0, 5), ids, ids.slice(0, 7), ids];
  const largeA = [-1, info.id, info.id, info.id];
  check(await forwardAll(model.native, model.config, large, largeA), large, largeA, 'a 29-row run');
});

t.test('two adapters and the base in concurrent generate() calls', async (t) => {
  model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  model.loadAdapter('tuned2', join(dir, cases.adapter.dir));
  const [a, b, c] = await Promise.all([
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false, adapter: 'tuned' }).result,
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false }).result,
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false, adapter: 'tuned2' }).result,
  ]);
  t.same(a.tokenIds, c.tokenIds, 'same adapter weights give the same tokens');
  t.notSame(a.tokenIds, b.tokenIds, 'adapter changes the continuation');
  // greedy first token equals the argmax of the golden's adapter logits at the last position
  const ref = expected.float32(cases.expected.logits_key);
  const V = model.config.vocabSize;
  const last = ref.subarray((ids.length - 1) * V, ids.length * V);
  let arg = 0;
  for (let i = 1; i < V; i++) if (last[i] > last[arg]) arg = i;
  t.equal(a.tokenIds[0], arg);
});

t.test('unload at run time', async (t) => {
  t.ok(model.unloadAdapter('tuned2'));
  t.notOk(model.unloadAdapter('tuned2'), 'second unload reports false');
  await t.rejects(model.generate({ prompt_ids: ids, max_tokens: 2, adapter: 'tuned2' }).result, AdapterError);
  const r = await model.generate({ prompt_ids: ids, max_tokens: 2, temperature: 0, adapter: 'tuned', stop_at_eos: false }).result;
  t.equal(r.tokenIds.length, 2);
  t.throws(() => model.loadAdapter('bad', join(dir, 'nope')), AdapterError);
});
