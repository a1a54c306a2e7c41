// Prefix caching: automatic (block-hash chain) and explicit (breakpoints, TTL) modes reuse KV blocks,
// report cache read/write tokens, and produce exactly the tokens of an uncached run — with an f32 and
// with a bf16 KV cache (cached blocks and copy-on-write copies hold the same bf16 bits an uncached
// run writes).
import t from 'tap';
import { join } from 'node:path';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { parseTtl } from '../../src/runtime/prefix-cache.ts';
import { sampleGroup } from '../../src/training/algorithms/grpo.ts';
import { goldens, shared } from './helpers.ts';

for (const kvDtype of ['f32', 'bf16'] as const) {
  const model = await loadDecoder(join(shared, 'models/tinystories-656k'), { kv: { memory: '16MiB', blockSize: 16 }, minCacheTokens: 32, kvDtype });
  const tok = model.tokenizer;
  const story = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog. One day, she saw a big red ball under a tree. ';
  const prefix = tok.encode(story + story + story);
  const promptA = [...prefix, ...tok.encode('Lily said', { addSpecialTokens: false })];
  const promptB = [...prefix, ...tok.encode('The dog ran', { addSpecialTokens: false })];
  const gen = (prompt_ids: number[], cache: object, max_tokens = 20) =>
    model.generate({ prompt_ids, max_tokens, temperature: 0, stop_at_eos: false, cache: cache as never }).result;

  t.test(`${kvDtype} KV: automatic: second request reuses full blocks, same tokens as uncached`, async (t) => {
    t.equal(model.info.kvDtype, kvDtype);
    const ref = await gen(promptA, { mode: 'none' });
    t.equal(ref.usage.cache_read_tokens, 0);
    const first = await gen(promptA, { mode: 'automatic' });
    t.same(first.tokenIds, ref.tokenIds);
    t.equal(first.usage.cache_read_tokens, 0);
    t.ok(first.usage.cache_write_tokens >= Math.floor(promptA.length / 16) * 16 - 16, `wrote ${first.usage.cache_write_tokens}`);
    const second = await gen(promptA, { mode: 'automatic' });
    t.same(second.tokenIds, ref.tokenIds, 'cached run = uncached run');
    t.equal(second.usage.cache_read_tokens, Math.floor((promptA.length - 1) / 16) * 16);
    const other = await gen(promptB, { mode: 'automatic' });
    const refB = await gen(promptB, { mode: 'none' });
    t.ok(other.usage.cache_read_tokens >= Math.floor(prefix.length / 16) * 16 - 16, `shared prefix read ${other.usage.cache_read_tokens}`);
    t.same(other.tokenIds, refB.tokenIds);
  });

  t.test(`${kvDtype} KV: automatic: samples of a running prompt copy its tail and compute one token`, async (t) => {
    model.prefix.clear();
    const ref = await gen(promptA, { mode: 'none' });
    // as GRPO samples a group: the lead prefills, the others are admitted while it decodes
    const req = { prompt_ids: promptA, max_tokens: 20, temperature: 0, stop_at_eos: false };
    const finals = await Promise.all(sampleGroup(model, req, 3, (k) => k));
    for (const f of finals) t.same(f.tokenIds, ref.tokenIds, 'same tokens as uncached');
    t.equal(finals[0].usage.cache_read_tokens, 0);
    for (const f of finals.slice(1))
      t.equal(f.usage.cache_read_tokens, promptA.length - 1, 'all but the last prompt token');
    // the tail lives only while its sequence holds it: a later request shares full blocks alone
    const later = await gen(promptA, { mode: 'automatic' });
    t.equal(later.usage.cache_read_tokens, Math.floor((promptA.length - 1) / 16) * 16);
    t.same(later.tokenIds, ref.tokenIds);
  });

  t.test(`${kvDtype} KV: explicit: only breakpoint prefixes are cached; partial block copy-on-write`, async (t) => {
    model.prefix.clear();
    const bp = prefix.length; // not a multiple of the block size in general
    t.ok(bp % 16 !== 0, `breakpoint ${bp} ends inside a block`);
    const refA = await gen(promptA, { mode: 'none' });
    const refB = await gen(promptB, { mode: 'none' });
    const w = await gen(promptA, { mode: 'explicit', breakpoints: [{ tokens: bp }] });
    t.equal(w.usage.cache_read_tokens, 0);
    t.equal(w.usage.cache_write_tokens, bp);
    t.same(w.tokenIds, refA.tokenIds);
    const r = await gen(promptB, { mode: 'explicit', breakpoints: [{ tokens: bp, ttl: '1h' }] });
    t.equal(r.usage.cache_read_tokens, bp, 'read the whole marked prefix');
    t.equal(r.usage.cache_write_tokens, 0);
    t.same(r.tokenIds, refB.tokenIds, 'cached run = uncached run');
    // the entry is intact after being read (its partial block was copied, not written)
    const r2 = await gen(promptA, { mode: 'explicit', breakpoints: [{ tokens: bp }] });
    t.equal(r2.usage.cache_read_tokens, bp);
    t.same(r2.tokenIds, refA.tokenIds);
    // no marker, no reuse in explicit mode
    const none = await gen(promptA, { mode: 'explicit' });
    t.equal(none.usage.cache_read_tokens, 0);
    // too-short breakpoints are not cached
    const short = await gen(promptA, { mode: 'explicit', breakpoints: [{ tokens: 8 }] });
    t.equal(short.usage.cache_write_tokens, 0);
  });

  t.test(`${kvDtype} KV: explicit: lookback reads an earlier marker's prefix when the marker moves to a later turn`, async (t) => {
    model.prefix.clear();
    // turn 1: marker at the end of the first turn
    const turn1 = [...prefix, ...tok.encode('Lily said', { addSpecialTokens: false })];
    const turn2 = [...turn1, ...tok.encode(' hello to the dog. The dog ran to the ball and', { addSpecialTokens: false })];
    const refA = await gen(turn1, { mode: 'none' });
    const refB = await gen(turn2, { mode: 'none' });
    const w = await gen(turn1, { mode: 'explicit', breakpoints: [{ tokens: turn1.length }] });
    t.equal(w.usage.cache_write_tokens, turn1.length);
    t.same(w.tokenIds, refA.tokenIds);
    // turn 2: the only marker is at the end of turn 2; turn 1's prefix is read by lookback
    const r = await gen(turn2, { mode: 'explicit', breakpoints: [{ tokens: turn2.length }] });
    t.equal(r.usage.cache_read_tokens, turn1.length, 'read the earlier marker\'s prefix');
    t.equal(r.usage.cache_write_tokens, turn2.length - turn1.length, 'wrote the rest up to the new marker');
    t.same(r.tokenIds, refB.tokenIds, 'cached run = uncached run');
    // and turn 2's own prefix is now the longest entry
    const r2 = await gen(turn2, { mode: 'explicit', breakpoints: [{ tokens: turn2.length }] });
    t.equal(r2.usage.cache_read_tokens, turn2.length - 1, 'whole prompt but the last token (it must be computed for logits)');
    t.same(r2.tokenIds, refB.tokenIds);
    // a prompt that diverges inside the cached prefix does not match it
    const other = [...prefix.slice(0, prefix.length - 5), ...tok.encode(' The cat', { addSpecialTokens: false }), ...turn2.slice(prefix.length)];
    const o = await gen(other, { mode: 'explicit', breakpoints: [{ tokens: other.length }] });
    t.equal(o.usage.cache_read_tokens, 0, 'no entry is a prefix of a diverging prompt');
    // a marker before the cached prefix's end cannot read it (lookback only goes back from the marker)
    const early = await gen(turn2, { mode: 'explicit', breakpoints: [{ tokens: turn1.length - 3 }] });
    t.equal(early.usage.cache_read_tokens, 0);
  });
}

t.test('explicit: TTL expiry', async (t) => {
  let now = 1_000_000;
  const { PrefixCache } = await import('../../src/runtime/prefix-cache.ts');
  const m2 = await loadDecoder(join(goldens, 'llama-tiny'), { kv: { memory: '2MiB' }, minCacheTokens: 4 });
  // swap in a prefix cache with a fake clock
  const pc = new PrefixCache(m2.kv, { minTokens: 4, now: () => now });
  (m2 as unknown as { prefix: unknown }).prefix = pc;
  (m2.scheduler as unknown as { prefix: unknown }).prefix = pc;
  const ids = [1, 80, 875, 566, 1844, 896, 758, 609, 1582, 1941, 10, 55, 66, 77, 88, 99, 111, 222, 333, 444, 555];
  const g = (ttl?: string) => m2.generate({ prompt_ids: ids, max_tokens: 3, temperature: 0, stop_at_eos: false, cache: { mode: 'explicit', breakpoints: [{ tokens: 18, ttl }] } }).result;
  t.equal((await g()).usage.cache_write_tokens, 18);
  now += 4 * 60_000;
  t.equal((await g()).usage.cache_read_tokens, 18, 'hit within 5 minutes refreshes');
  now += 4 * 60_000;
  t.equal((await g()).usage.cache_read_tokens, 18, 'still alive: inactivity TTL was refreshed');
  now += 6 * 60_000;
  const miss = await g('1h');
  t.equal(miss.usage.cache_read_tokens, 0, 'expired after 5 minutes idle');
  t.equal(miss.usage.cache_write_tokens, 18);
  now += 30 * 60_000;
  t.equal((await g()).usage.cache_read_tokens, 18, '1h ttl outlives 5 minutes');
  t.equal(parseTtl('5m'), 300_000);
  t.equal(parseTtl('1h'), 3_600_000);
  t.throws(() => parseTtl('soon'));
});
