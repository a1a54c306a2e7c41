// The real TinyStories-656k checkpoint (tied embeddings stored only as lm_head.weight, GQA 8/4):
// logits, top-5 next-token log-probs and 64-step greedy continuations against the goldens (§2).
import t from 'tap';
import { join } from 'node:path';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, goldens, maxAbs, readCases, shared } from './helpers.ts';

const dir = join(goldens, 'tinystories-656k');
const cases = readCases(dir);
const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
const model = await loadDecoder(join(shared, 'models/tinystories-656k'), { kv: { memory: '16MiB' } });

t.test('logits and top-5 log-probs', async (t) => {
  for (const p of cases.prompts) {
    const [got] = await forwardAll(model.native, model.config, [p.input_ids]);
    const d = maxAbs(got, expected.float32(p.logits_key));
    t.ok(d <= 1e-4, `${p.name}: logits max abs ${d.toExponential(2)}`);
    // top-5 through the public API (logprobs of the first generated token)
    const r = model.generate({ prompt_ids: p.input_ids, max_tokens: 1, temperature: 0, logprobs: true, top_logprobs: 5, stop_at_eos: false });
    let top: { id: number; logprob: number }[] = [];
    for await (const ev of r) if (ev.type === 'delta' && ev.logprobs) top = ev.logprobs[0].top_logprobs ?? [];
    t.same(top.map((x) => x.id), p.top5_next_token.map((x: { id: number }) => x.id), `${p.name}: top-5 ids in order`);
    const lpErr = Math.max(...top.map((x, i) => Math.abs(x.logprob - p.top5_next_token[i].logprob)));
    t.ok(lpErr <= 1e-4, `${p.name}: top-5 logprob err ${lpErr.toExponential(2)}`);
  }
});

t.test('64-step greedy continuations, all prompts concurrently', async (t) => {
  const res = await Promise.all(cases.prompts.map((p: { input_ids: number[] }) =>
    model.generate({ prompt_ids: p.input_ids, max_tokens: 64, temperature: 0, stop_at_eos: false }).result));
  cases.prompts.forEach((p: { name: string; greedy: { new_ids: number[] } }, i: number) => t.same(res[i].tokenIds, p.greedy.new_ids, p.name));
});

t.test('text in, text out: prompt string and streamed deltas', async (t) => {
  const p = cases.prompts[0];
  const s = model.generate({ prompt: p.text, max_tokens: 64, temperature: 0, stop_at_eos: false });
  let text = '';
  const ids: number[] = [];
  for await (const ev of s) {
    if (ev.type === 'delta') {
      text += ev.text;
      ids.push(...ev.tokenIds);
    } else {
      t.equal(ev.text, text, 'final text = concatenated deltas');
      t.equal(ev.usage.prompt_tokens, p.input_ids.length);
    }
  }
  t.same(ids, p.greedy.new_ids);
  t.equal(text, p.greedy.decoded_new);
});

t.test('EOS stops generation with finish_reason stop', async (t) => {
  // No golden prompt reaches EOS within 64 steps; this story's ending does: greedy, the model writes
  // its end marker and then EOS after a few tokens (measured: EOS is the 5th new token).
  const prompt = 'Once upon a time, there was a little girl named Lily.';
  const eos = new Set(model.config.eosTokenIds);
  t.ok(eos.size > 0, `the model has EOS ids (${[...eos]})`);
  // the same greedy run, told to ignore EOS: where the first EOS falls
  const free = await model.generate({ prompt, max_tokens: 32, temperature: 0, stop_at_eos: false }).result;
  const k = free.tokenIds.findIndex((id) => eos.has(id));
  t.ok(k >= 0, `greedy continuation emits EOS (first at new token ${k})`);
  t.equal(free.finish_reason, 'length', 'without stop_at_eos it runs on past EOS');
  // by default EOS ends it there: the same tokens up to and including EOS, nothing after
  const r = await model.generate({ prompt, max_tokens: 32, temperature: 0 }).result;
  t.equal(r.finish_reason, 'stop');
  t.same(r.tokenIds, free.tokenIds.slice(0, k + 1), 'stopped at the first EOS');
  t.equal(r.usage.completion_tokens, k + 1);
  t.ok(r.tokenIds.length < 32, 'before the token limit');
  t.equal(r.text, free.text.slice(0, r.text.length), "the text is the free run's prefix");
  t.ok(free.text.length > r.text.length, 'the free run wrote more after EOS');
});

t.test('stop strings end generation before the stop text', async (t) => {
  const p = cases.prompts[0];
  const full: string = p.greedy.decoded_new;
  const cut = full.indexOf(' ', 10);
  const stop = full.slice(cut, cut + 4);
  const r = await model.generate({ prompt_ids: p.input_ids, max_tokens: 64, temperature: 0, stop: [stop], stop_at_eos: false }).result;
  t.equal(r.finish_reason, 'stop');
  t.equal(r.text, full.slice(0, full.indexOf(stop)));
});

t.test('seeded sampling is reproducible', async (t) => {
  const p = cases.prompts[1];
  const a = await model.generate({ prompt_ids: p.input_ids, max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 7, stop_at_eos: false }).result;
  const b = await model.generate({ prompt_ids: p.input_ids, max_tokens: 24, temperature: 0.9, top_p: 0.95, seed: 7, stop_at_eos: false }).result;
  t.same(a.tokenIds, b.tokenIds);
});

t.test('embeddings: mean-pooled final hidden states', async (t) => {
  const [a, b] = await model.embed(['Once upon a time', 'Once upon a time']);
  t.equal(a.length, model.config.hiddenSize);
  t.same(Array.from(a), Array.from(b), 'deterministic');
  const [c] = await model.embed(['The girl was sad']);
  t.ok(maxAbs(a, c) > 1e-3, 'different texts differ');
  t.ok(a.every(Number.isFinite));
});

// Steps through a running generation's events (one delta per decode step) until the scheduler holds `blocks` KV
// blocks. A poll on a 1 ms timer could miss that window when steps are fast: the generation then ended, freed its
// blocks, and the poll waited forever (the test hung at no CPU).
async function untilBlocksUsed(m: Awaited<ReturnType<typeof loadDecoder>>, stream: AsyncIterable<{ type: string }>,
  blocks: number): Promise<void> {
  const it = stream[Symbol.asyncIterator]();  // never returned: that would cancel the generation
  while (m.scheduler.stats().kvBlocksUsed < blocks) {
    const r = await it.next();
    if (r.done || r.value.type === 'final') throw new Error(`the generation ended before it held ${blocks} KV blocks`);
  }
}

t.test('embeddings wait for KV blocks held by a running generation instead of failing', async (t) => {
  const m = await loadDecoder(join(shared, 'models/tinystories-656k'), { kv: { memory: '16MiB', blockSize: 16, maxBlocks: 12 } });
  const ids = model.tokenizer.encode('Once upon a time, there was a little girl named Lily. She loved to play outside with her dog in the big green park near her house.');
  t.ok(ids.length > 16 && ids.length <= 64, `${ids.length} tokens need ${Math.ceil(ids.length / 16)} blocks`);
  const idle = await m.embedIds(ids);
  // a generation that holds 11 of the 12 blocks by the time it ends
  const s1 = m.generate({ prompt_ids: Array.from({ length: 20 }, (_, i) => 10 + i), max_tokens: 150, temperature: 0, stop_at_eos: false });
  const gen = s1.result;
  await untilBlocksUsed(m, s1, 12 - Math.ceil(ids.length / 16) + 1);
  t.ok(m.kv.available() < Math.ceil(ids.length / 16), `only ${m.kv.available()} blocks free when the embedding is asked for`);
  const [busy, done] = await Promise.all([m.embedIds(ids), gen]);
  t.equal(done.tokenIds.length, 150, 'the generation was not disturbed');
  t.same(Array.from(busy), Array.from(idle), 'same vector as with an idle cache');
  await t.rejects(m.embedIds(Array.from({ length: 200 }, () => 5)), { name: 'RequestTooLargeError' }, 'more than the whole cache');
  // a short wait limit gives OverloadedError (529) while blocks stay taken
  const s2 = m.generate({ prompt_ids: Array.from({ length: 20 }, (_, i) => 10 + i), max_tokens: 150, temperature: 0, stop_at_eos: false });
  await untilBlocksUsed(m, s2, 12 - Math.ceil(ids.length / 16) + 1);
  await t.rejects(m.embedIds(ids, { waitMs: 0 }), { name: 'OverloadedError' });
  await s2.result;
});
