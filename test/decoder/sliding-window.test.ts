// Sliding-window models release the KV blocks no later query can see: a long generation holds about
// window / blockSize blocks, so it runs in a cache far smaller than its length, with the same tokens
// as a run in a large cache; blocks an explicit cache breakpoint needs are kept until it is published.
import t from 'tap';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { goldens } from './helpers.ts';

const W = 32;
const dir = mkdtempSync(join(tmpdir(), 'loom-swa-'));
cpSync(join(goldens, 'mistral-tiny'), dir, { recursive: true });
const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
cfg.sliding_window = W;
writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const prompt = Array.from({ length: 20 }, (_, i) => 5 + ((i * 37) % 1900));

t.test(`window ${W}: a 300-token generation runs in 8 blocks of 16 and matches a large cache`, async (t) => {
  const big = await loadDecoder(dir, { kv: { memory: '8MiB', blockSize: 16 } });
  t.equal(big.config.slidingWindow, W);
  const ref = await big.generate({ prompt_ids: prompt, max_tokens: 300, temperature: 0, stop_at_eos: false }).result;
  t.equal(ref.tokenIds.length, 300);

  const small = await loadDecoder(dir, { kv: { memory: '8MiB', blockSize: 16, maxBlocks: 8 } });
  t.equal(small.scheduler.stats().kvBlocksTotal, 8, '8 blocks = 128 token slots for 320 positions');
  let peak = 0;
  const timer = setInterval(() => (peak = Math.max(peak, small.scheduler.stats().kvBlocksUsed)), 1);
  const got = await small.generate({ prompt_ids: prompt, max_tokens: 300, temperature: 0, stop_at_eos: false }).result;
  clearInterval(timer);
  t.equal(got.tokenIds.length, 300, 'ran to max_tokens');
  t.same(got.tokenIds, ref.tokenIds, 'same tokens as with every block kept');
  t.ok(peak <= Math.ceil(W / 16) + 2, `at most ${Math.ceil(W / 16) + 2} blocks held (peak ${peak})`);
  t.equal(small.scheduler.stats().kvBlocksUsed, 0, 'all released at the end');

  // two sequences at once, one of them longer than the cache: both finish, same tokens
  const p2 = prompt.slice(0, 12);
  const ref2 = await big.generate({ prompt_ids: p2, max_tokens: 200, temperature: 0, stop_at_eos: false }).result;
  const [a, b] = await Promise.all([
    small.generate({ prompt_ids: prompt, max_tokens: 300, temperature: 0, stop_at_eos: false }).result,
    small.generate({ prompt_ids: p2, max_tokens: 200, temperature: 0, stop_at_eos: false }).result,
  ]);
  t.same(a.tokenIds, ref.tokenIds);
  t.same(b.tokenIds, ref2.tokenIds);
});

t.test(`window ${W}: a cached explicit prefix keeps its blocks; reading it gives the same tokens`, async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '8MiB', blockSize: 16, maxBlocks: 24 }, minCacheTokens: 16 });
  const long = Array.from({ length: 70 }, (_, i) => 7 + ((i * 53) % 1900));
  const bp = 67;
  const ref = await m.generate({ prompt_ids: long, max_tokens: 40, temperature: 0, stop_at_eos: false }).result;
  const w = await m.generate({ prompt_ids: long, max_tokens: 40, temperature: 0, stop_at_eos: false, cache: { mode: 'explicit', breakpoints: [{ tokens: bp }] } }).result;
  t.equal(w.usage.cache_write_tokens, bp);
  t.same(w.tokenIds, ref.tokenIds);
  const r = await m.generate({ prompt_ids: long, max_tokens: 40, temperature: 0, stop_at_eos: false, cache: { mode: 'explicit', breakpoints: [{ tokens: bp }] } }).result;
  t.equal(r.usage.cache_read_tokens, bp, 'the entry survived the first sequence releasing its window');
  t.same(r.tokenIds, ref.tokenIds, 'cached run = uncached run');
  const auto1 = await m.generate({ prompt_ids: long, max_tokens: 40, temperature: 0, stop_at_eos: false, cache: { mode: 'automatic' } }).result;
  const auto2 = await m.generate({ prompt_ids: long, max_tokens: 40, temperature: 0, stop_at_eos: false, cache: { mode: 'automatic' } }).result;
  t.ok(auto2.usage.cache_read_tokens >= 64, `automatic reuse after release (${auto2.usage.cache_read_tokens})`);
  t.same(auto1.tokenIds, ref.tokenIds);
  t.same(auto2.tokenIds, ref.tokenIds);
});

t.test('a released (-1) block table entry is refused inside the window', async (t) => {
  const m = await loadDecoder(dir, { kv: { memory: '8MiB', blockSize: 16 } });
  const { NativeKvCache } = await import('../../src/models/decoder/native-model.ts');
  const kv = new NativeKvCache(m.config, 8, 16);
  const V = m.config.vocabSize;
  const step = (pos: number, table: number[]) =>
    m.native.step(kv, { tokens: Int32Array.of(5), positions: Int32Array.of(pos), seqLens: Int32Array.of(1), tables: Int32Array.from(table), tableOffsets: Int32Array.of(0, table.length), outRows: Int32Array.of(0) }, new Float32Array(V));
  // position 40 sees keys 9..40: blocks 0 (slots 0-15) .. 2 are needed, so block 0 may not be -1
  await t.rejects(async () => step(40, [-1, 1, 2]), /is -1 but inside the attention window/);
  // position 60 sees keys 29..60: block 0 is out of the window and may be -1
  await t.resolves(async () => step(60, [-1, 1, 2, 3]));
  await t.rejects(async () => step(60, [-2, 1, 2, 3]), /block id out of range/);
});
