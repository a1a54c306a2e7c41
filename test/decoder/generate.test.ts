// generate() API surface: chat messages through the chat template (with cache_control markers),
// structured output from a JSON schema, logprobs shape, usage record.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { shared } from './helpers.ts';

const model = await loadDecoder(join(shared, 'models/tinystories-656k'), { kv: { memory: '16MiB' }, minCacheTokens: 16 });

t.test('info', async (t) => {
  t.equal(model.info.vocabSize, 2048);
  t.equal(model.info.contextLength, 512);
  t.equal(model.info.caching.mode, 'automatic');
  t.ok(model.info.weightBytes > 0);
  t.ok(model.info.kvBlocks > 0);
});

t.test('chat messages with cache_control: cached run = uncached run', async (t) => {
  const sys = 'Once upon a time there was a big dog. The dog liked to run in the park and play with a ball every day. '.repeat(2);
  const messages = (q: string) => [
    { role: 'system' as const, content: [{ type: 'text', text: sys, cache_control: { type: 'ephemeral' as const } }] },
    { role: 'user' as const, content: q },
  ];
  const ref = await model.generate({ messages: messages('Tell me a story.'), max_tokens: 12, temperature: 0, stop_at_eos: false, cache: { mode: 'none' } }).result;
  t.ok(ref.usage.prompt_tokens > 40);
  const a = await model.generate({ messages: messages('Tell me a story.'), max_tokens: 12, temperature: 0, stop_at_eos: false }).result;
  t.ok(a.usage.cache_write_tokens > 16, `wrote ${a.usage.cache_write_tokens}`);
  t.same(a.tokenIds, ref.tokenIds);
  const b = await model.generate({ messages: messages('Tell me a story.'), max_tokens: 12, temperature: 0, stop_at_eos: false }).result;
  t.equal(b.usage.cache_read_tokens, a.usage.cache_write_tokens, 'reads the prefix written before');
  t.same(b.tokenIds, ref.tokenIds);
});

t.test('structured output always parses and validates', async (t) => {
  // The TinyStories vocabulary has no '{' or '[' token, so object/array schemas cannot be expressed with
  // it; top-level strings, enums, booleans and numbers can.
  const schemas: [object, (v: unknown) => boolean][] = [
    [{ type: 'string', maxLength: 20 }, (v) => typeof v === 'string' && v.length <= 20],
    [{ enum: ['sad', 'glad', 'mad'] }, (v) => ['sad', 'glad', 'mad'].includes(v as string)],
    [{ type: 'boolean' }, (v) => typeof v === 'boolean'],
    [{ type: 'integer' }, (v) => Number.isInteger(v)],
  ];
  // Room enough for every value: each run must end because the value is complete (finish 'stop', the
  // constraint closed it), never by the token limit (measured: these runs take 4 to 18 tokens).
  const maxTokens = 200;
  for (const [schema, valid] of schemas) {
    for (const seed of [1, 2]) {
      const rf = { type: 'json_schema' as const, json_schema: { schema } };
      const prompt = 'Lily and Tom went to the park';
      const req = { prompt, max_tokens: maxTokens, temperature: 0.8, seed, response_format: rf };
      const r = await model.generate(req).result;
      t.equal(r.finish_reason, 'stop', `${JSON.stringify(schema)} seed ${seed}: the value ended (${r.text})`);
      t.ok(r.tokenIds.length < maxTokens, `within ${maxTokens} tokens (${r.tokenIds.length})`);
      let v: unknown;
      t.doesNotThrow(() => (v = JSON.parse(r.text)), `${JSON.stringify(schema)} seed ${seed}: ${r.text} parses`);
      t.ok(valid(v), `validates: ${r.text}`);
    }
  }
});

t.test('a schema the vocabulary cannot spell fails up front with a typed error', async (t) => {
  for (const rf of [{ type: 'json_schema' as const, json_schema: { schema: { type: 'object', properties: { a: { type: 'integer' } } } } }, { type: 'json_object' as const }]) {
    const steps0 = model.scheduler.stats().steps;
    const err = await model.generate({ prompt: 'Lily', max_tokens: 20, response_format: rf }).result.catch((e) => e);
    t.equal(err?.name, 'ConstraintUnsatisfiableError', `${rf.type}: ${err?.message}`);
    t.equal(err?.code, 'response_format_unsatisfiable');
    t.match(err?.message, /cannot produce JSON/);
    t.equal(model.scheduler.stats().steps, steps0, 'nothing ran');
  }
});

t.test('stop_sequence names the stop string that ended the generation', async (t) => {
  const free = await model.generate({ prompt: 'Lily and Tom went to the park', max_tokens: 24, temperature: 0, stop_at_eos: false }).result;
  t.equal(free.stop_sequence, null);
  const word = free.text.split(/\s+/).filter((w) => /^[a-z]{3,}$/i.test(w))[1]!;
  const cut = await model.generate({ prompt: 'Lily and Tom went to the park', max_tokens: 24, temperature: 0, stop_at_eos: false, stop: ['@@', word] }).result;
  t.equal(cut.finish_reason, 'stop');
  t.equal(cut.stop_sequence, word);
  t.equal(cut.text, free.text.slice(0, free.text.indexOf(word)));
});

t.test('an aborted generation reports what it processed (AbortError.usage)', async (t) => {
  const ac = new AbortController();
  const s = model.generate({ prompt: 'Lily and Tom went to the park', max_tokens: 200, temperature: 0.8, stop_at_eos: false, signal: ac.signal, cache: { mode: 'none' } });
  let n = 0;
  let text = '';
  const err = await (async () => {
    for await (const ev of s) {
      if (ev.type === 'delta') { text += ev.text; if (++n === 5) ac.abort(); }
    }
  })().catch((e) => e);
  t.equal(err?.name, 'AbortError');
  t.ok(err.usage.completion_tokens >= 5 && err.usage.completion_tokens < 200, JSON.stringify(err.usage));
  t.equal(err.usage.prompt_tokens, (await model.preparePrompt({ prompt: 'Lily and Tom went to the park' })).ids.length, 'the whole prompt was processed');
  t.ok(err.text.startsWith(text), 'text so far');
});

t.test('logprobs', async (t) => {
  const evs = [];
  for await (const ev of model.generate({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2, stop_at_eos: false })) evs.push(ev);
  const deltas = evs.filter((e) => e.type === 'delta');
  t.equal(deltas.length, 3);
  for (const d of deltas) {
    if (d.type !== 'delta') continue;
    t.equal(d.logprobs?.length, 1);
    t.equal(d.logprobs![0].top_logprobs!.length, 2);
    t.equal(d.logprobs![0].id, d.tokenIds[0]);
    t.ok(d.logprobs![0].logprob <= 0);
  }
  const fin = evs[evs.length - 1];
  t.equal(fin.type, 'final');
});

t.test('loadDecoder by model id: models dir, and known-but-not-downloaded', async (t) => {
  const { mkdtempSync, mkdirSync, cpSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { KNOWN_MODELS } = await import('../../src/runtime/hub.ts');
  const { ModelNotOnDiskError } = await import('../../src/runtime/generate.ts');
  const md = mkdtempSync(join(tmpdir(), 'loom-models-'));
  const prev = process.env.LOOM_MODELS_DIR;
  const prevHf = process.env.HF_HUB_CACHE;
  process.env.LOOM_MODELS_DIR = md;
  process.env.HF_HUB_CACHE = join(md, 'hf-empty');
  t.teardown(() => {
    if (prev === undefined) delete process.env.LOOM_MODELS_DIR; else process.env.LOOM_MODELS_DIR = prev;
    if (prevHf === undefined) delete process.env.HF_HUB_CACHE; else process.env.HF_HUB_CACHE = prevHf;
    rmSync(md, { recursive: true, force: true });
  });
  mkdirSync(join(md, 'roneneldan'), { recursive: true });
  cpSync(join(shared, 'models/tinystories-656k'), join(md, 'roneneldan', 'tiny-test'), { recursive: true });
  const m = await loadDecoder('roneneldan/tiny-test', { kv: { memory: '4MiB' } });
  t.equal(m.info.id, 'roneneldan/tiny-test');
  t.equal(m.config.vocabSize, 2048);
  await t.rejects(loadDecoder(KNOWN_MODELS[0]), ModelNotOnDiskError);
  await t.rejects(loadDecoder('nobody/nothing-here'), /not found/);
});

t.test('close() releases the native weights and KV cache at once; a generation in flight ends, the handle is spent',
  async (t) => {
    const m = await loadDecoder(join(shared, 'models/tinystories-656k'), { kv: { memory: '4MiB' } });
    const ids = m.tokenizer.encode('Once upon a time');
    const running = m.generate({ prompt_ids: ids, max_tokens: 200, temperature: 0, stop_at_eos: false }).result;
    await new Promise((r) => setTimeout(r, 5));
    m.close();
    await t.rejects(running, /unloaded/, 'the running generation fails with the unload');
    // the native objects are released, not left to garbage collection: any later use names the spent handle
    const kv = m.kv.native;
    t.throws(() => kv.readBlock(0, 0), /kv cache handle is invalid/);
    await t.rejects(m.generate({ prompt_ids: ids, max_tokens: 2 }).result, /model handle is invalid/);
    t.doesNotThrow(() => m.close(), 'a second close is harmless');
  });
