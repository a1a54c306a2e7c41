// Continuous batching: back-pressure when the KV cache is full (queue + preemption, never a crash),
// results identical to running alone, cancellation frees blocks at once, queue depth limit (529),
// and the event loop stays responsive while steps run natively.
import t from 'tap';
import { join } from 'node:path';
import { AbortError, loadDecoder, OverloadedError, RequestTooLargeError } from '../../src/runtime/generate.ts';
import { parseMemorySize } from '../../src/runtime/kv-cache.ts';
import { argmaxF32 } from '../../src/native/ops.ts';
import { goldens, readCases } from './helpers.ts';

const dir = join(goldens, 'llama-tiny');
const cases = readCases(dir);
const prompts: { input_ids: number[]; greedy: { new_ids: number[] } }[] = cases.prompts;

t.test('memory sizes', async (t) => {
  t.equal(parseMemorySize('512MiB'), 512 * 1024 * 1024);
  t.equal(parseMemorySize('1.5GB'), 1.5e9);
  t.equal(parseMemorySize('2 gib'), 2 * 1024 ** 3);
  t.throws(() => parseMemorySize('lots'));
  t.throws(() => parseMemorySize('0MiB'));
});

t.test('tiny KV cache: 12 concurrent requests queue, preempt and all finish correctly', async (t) => {
  // 6 blocks × 16 = 96 token slots; each request needs up to 41
  const m = await loadDecoder(dir, { kv: { memory: '64MiB', maxBlocks: 6, blockSize: 16 }, maxStepTokens: 64 });
  t.equal(m.kv.numBlocks, 6);
  const jobs = Array.from({ length: 12 }, (_, i) => prompts[i % 4]);
  const res = await Promise.all(jobs.map((p) => m.generate({ prompt_ids: p.input_ids, max_tokens: 16, temperature: 0, stop_at_eos: false }).result));
  res.forEach((r, i) => t.same(r.tokenIds, jobs[i].greedy.new_ids, `request ${i}`));
  t.equal(m.kv.available(), 6, 'every block is free again');
  t.equal(m.scheduler.stats().running, 0);
});

t.test('prompts that can never fit are refused up front', async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '64MiB', maxBlocks: 1, blockSize: 16 } });
  await t.rejects(m.generate({ prompt_ids: prompts[3].input_ids, max_tokens: 4 }).result, RequestTooLargeError);
  await t.rejects(m.generate({ prompt_ids: new Array(600).fill(5), max_tokens: 4 }).result, RequestTooLargeError);
});

t.test('abort frees the slot and its blocks immediately', async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '8MiB', blockSize: 16 } });
  const total = m.kv.available();
  const ac = new AbortController();
  const s = m.generate({ prompt_ids: prompts[3].input_ids, max_tokens: 400, temperature: 0, stop_at_eos: false, signal: ac.signal });
  let n = 0;
  await t.rejects(
    (async () => {
      for await (const ev of s) {
        if (ev.type === 'delta' && ++n === 5) {
          ac.abort();
          t.equal(m.kv.available(), total, 'blocks released synchronously on abort');
        }
      }
    })(),
    AbortError,
  );
  t.equal(n, 5);
  // breaking out of the iterator cancels too
  const s2 = m.generate({ prompt_ids: prompts[2].input_ids, max_tokens: 400, temperature: 0, stop_at_eos: false });
  for await (const ev of s2) if (ev.type === 'delta') break;
  await t.rejects(s2.result, AbortError);
  t.equal(m.kv.available(), total);
  // an already-aborted signal
  await t.rejects(m.generate({ prompt_ids: [1], max_tokens: 3, signal: AbortSignal.abort() }).result, AbortError);
});

t.test('queue depth limit answers overloaded', async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '8MiB' }, maxQueue: 3, maxRunning: 1 });
  const ok = [0, 1, 2].map(() => m.generate({ prompt_ids: prompts[1].input_ids, max_tokens: 4, temperature: 0, stop_at_eos: false }));
  const over = m.generate({ prompt_ids: prompts[1].input_ids, max_tokens: 4 });
  // the first is admitted on the next step; until then all wait in the queue
  await t.rejects(over.result, OverloadedError);
  const e = await over.result.catch((x) => x);
  t.equal(e.status, 529);
  for (const s of ok) t.equal((await s.result).tokenIds.length, 4);
});

t.test('event loop keeps running during generation', async (t) => {
  const m = await loadDecoder(join(goldens, 'mistral-tiny'), { kv: { memory: '8MiB' } });
  let ticks = 0;
  const iv = setInterval(() => ticks++, 0);
  const r = await m.generate({ prompt_ids: prompts[3].input_ids, max_tokens: 100, temperature: 0, stop_at_eos: false }).result;
  clearInterval(iv);
  t.equal(r.tokenIds.length, 100);
  t.ok(ticks > 5, `timers fired ${ticks} times while decoding`);
});

t.test('bad parameters are clear errors', async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '4MiB' } });
  await t.rejects(m.generate({ prompt_ids: [1], temperature: -1 }).result, /temperature/);
  await t.rejects(m.generate({ prompt_ids: [1], max_tokens: 0 }).result, /max_tokens/);
  await t.rejects(m.generate({ prompt_ids: [99999], max_tokens: 2 }).result, /out of range/);
  await t.rejects(m.generate({} as never).result, /messages, prompt or prompt_ids/);
});

t.test("the handlers of a step of several rows get the step's argmax of their logits, argmaxF32's", async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '8MiB' } });
  const V = m.scheduler.config.vocabSize;
  let calls = 0, same = 0;
  await Promise.all(prompts.map((p) => new Promise<void>((resolve, reject) => {
    let n = 0;
    m.scheduler.submit({
      prompt: p.input_ids, maxTokens: 8, cache: { mode: 'none' },
      handler: {
        next: (l: Float32Array, _p, best?: number) => {
          if (best !== undefined) calls++;  // a step of one row leaves the argmax to the handler
          if (best !== undefined && best === argmaxF32(l.subarray(0, V))) same++;
          return n++ < 8 ? Math.max(0, best ?? 0) : null;
        },
        done: () => resolve(),
        fail: reject,
      },
    });
  })));
  t.ok(calls >= prompts.length * 4, `${calls} calls with the step's argmax`);
  t.equal(same, calls);
});
