// Synthetic data generation and auto-labeling through HTTP over the real tiny models (TinyStories
// decoder writes, the tiny GLiNER2 encoder labels): job states, the new dataset version, the
// label-existing element shapes and the 1..1000 input bound (422). The concurrency caps (global and
// per team; the rest wait `queued`) over the fake runtime with its decoder held.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { poll, uploadDataset } from './customization-helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';
import type { GenerateParams, ModelRef } from '../../src/service/runtime.ts';

const shared = join(import.meta.dirname, '../../../shared');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-gen-models-'));
symlinkSync(join(shared, 'goldens/gliner2-tiny-span'), join(modelsDir, 'gliner2-tiny-span'));
symlinkSync(join(shared, 'models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => { await ts.close(); rmSync(modelsDir, { recursive: true, force: true }); });
const u = await makeUser(ts, { credits: 100 });

t.test('label-existing: one element per input; 422 outside 1..1000 inputs', async (t) => {
  const ner = await call(ts.url, 'POST', '/generate/ner/label-existing', { key: u.key, body: { labels: ['person', 'city'], inputs: ['Alice lives in Paris', 'Bob works in Berlin'], model_id: 'gliner2-tiny-span', threshold: 0.3 } });
  t.equal(ner.status, 200);
  t.equal(ner.body.length, 2);
  t.equal(ner.body[0].text, 'Alice lives in Paris');
  t.ok(ner.body[0].entities.length > 0);
  for (const e of ner.body[0].entities) {
    t.same(Object.keys(e).sort(), ['confidence', 'end', 'label', 'start', 'text']);
    t.equal('Alice lives in Paris'.slice(e.start, e.end), e.text);
    t.ok(['person', 'city'].includes(e.label));
  }
  const cls = await call(ts.url, 'POST', '/generate/classification/label-existing', { key: u.key, body: { labels: ['positive', 'negative'], inputs: ['great', 'awful', 'fine'], model_id: 'gliner2-tiny-span' } });
  t.equal(cls.status, 200);
  t.equal(cls.body.length, 3);
  for (const c of cls.body) {
    t.ok(['positive', 'negative'].includes(c.label));
    t.ok(c.confidence > 0 && c.confidence <= 1);
  }
  const none = await call(ts.url, 'POST', '/generate/ner/label-existing', { key: u.key, body: { labels: ['person'], inputs: [] } });
  t.equal(none.status, 422);
  t.match(none.body, { detail: /inputs/, errors: [{ path: '/inputs' }] });
  const many = await call(ts.url, 'POST', '/generate/classification/label-existing', { key: u.key, body: { labels: ['a', 'b'], inputs: Array.from({ length: 1001 }, (_, i) => `t${i}`) } });
  t.equal(many.status, 422);
  t.equal((await call(ts.url, 'POST', '/generate/ner/label-existing', { key: u.key, body: { inputs: ['x'] } })).status, 422, 'labels required');
  t.equal((await call(ts.url, 'POST', '/generate/classification/label-existing', { key: u.key, body: { labels: ['only'], inputs: ['x'] } })).status, 422, 'two classes at least');
  t.equal((await call(ts.url, 'POST', '/generate/ner/label-existing', { body: { labels: ['person'], inputs: ['x'] } })).status, 401);
});

t.test('POST /generate: classification job → ready → a new dataset version', async (t) => {
  const bad = await call(ts.url, 'POST', '/generate', { key: u.key, body: { task_type: 'images', dataset_name: 'x' } });
  t.equal(bad.status, 422);
  t.match(bad.body, { detail: String, errors: [{ path: '/task_type' }] });
  t.equal((await call(ts.url, 'POST', '/generate', { key: u.key, body: { task_type: 'ner', dataset_name: 'x' } })).status, 422, 'ner needs labels');
  t.equal((await call(ts.url, 'POST', '/generate', { key: u.key, body: { task_type: 'classification', dataset_name: 'x', labels: ['a', 'b'], num_examples: 0 } })).status, 422);

  t.equal((await uploadDataset(ts.url, u.key, 'moods', 'classification', 'm.jsonl', '{"text": "yay", "label": "happy"}\n{"text": "boo", "label": "sad"}\n')).body.status, 'ready');
  const r = await call(ts.url, 'POST', '/generate', { key: u.key, body: { task_type: 'classification', dataset_name: 'moods', labels: ['happy', 'sad'], num_examples: 4, domain_description: 'children stories', model_id: 'tinystories-656k' } });
  t.equal(r.status, 200);
  t.same(Object.keys(r.body).sort(), ['job_id', 'status']);
  t.equal(r.body.status, 'queued');
  const done = await poll(() => call(ts.url, 'GET', `/generate/jobs/${r.body.job_id}`, { key: u.key }), (x) => x.body.status === 'ready' || x.body.status === 'failed', 60_000);
  t.match(done.body, { job_id: r.body.job_id, status: 'ready', dataset_name: 'moods', task_type: 'classification', count: 4, error: null });
  t.type(done.body.created_at, 'string');
  const versions = (await call(ts.url, 'GET', '/felix/datasets/moods', { key: u.key })).body.versions;
  t.match(versions, [{ version_number: '2', source: 'generate', status: 'ready', size: 4, labels: { happy: 2, sad: 2 } }, { version_number: '1', source: 'upload' }], 'generating into an existing name adds a version');
  t.equal((await call(ts.url, 'GET', '/generate/jobs/00000000-0000-4000-8000-000000000000', { key: u.key })).status, 404);
  const other = await makeUser(ts);
  t.equal((await call(ts.url, 'GET', `/generate/jobs/${r.body.job_id}`, { key: other.key })).status, 404);
});

t.test('POST /generate: at most N jobs generate at once (in all and per team); the rest wait queued', async (t) => {
  // the fake decoder waits for `open` before each reply, so running jobs stay `generating`
  let open!: () => void;
  const gate = new Promise<void>((r) => { open = r; });
  const rt = new FakeRuntime();
  const generate = rt.generate.bind(rt);
  rt.generate = async function* (ref: ModelRef, p: GenerateParams) { await gate; yield* generate(ref, p); };
  const gs = await startServer({ runtime: rt, config: { generationConcurrency: 3, generationConcurrencyPerTeam: 2 } });
  t.teardown(() => gs.close());
  const a = await makeUser(gs);
  const b = await makeUser(gs);
  const body = (name: string) => ({
    task_type: 'classification', dataset_name: name, labels: ['yes', 'no'], num_examples: 2,
  });
  const ids: Array<[string, string]> = [];
  for (const [who, n] of [[a, 4], [b, 3]] as const) {
    for (let i = 0; i < n; i++) {
      const r = await call(gs.url, 'POST', '/generate', { key: who.key, body: body(`d${i}`) });
      t.equal(r.status, 200);
      t.equal(r.body.status, 'queued');
      ids.push([who.key, r.body.job_id]);
    }
  }
  await new Promise((r) => setTimeout(r, 300));
  const states = () => Promise.all(ids.map(async ([key, id]) => {
    return (await call(gs.url, 'GET', `/generate/jobs/${id}`, { key })).body.status as string;
  }));
  const held = await states();
  t.same(held.slice(0, 4), ['generating', 'generating', 'queued', 'queued'], 'team A: 2 generating (its cap)');
  t.same(held.slice(4), ['generating', 'queued', 'queued'], 'team B: the one slot left of 3');
  open();
  const until = Date.now() + 60_000;
  let end = await states();
  while (end.some((s) => s !== 'ready' && s !== 'failed') && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    end = await states();
  }
  t.same(end, Array(7).fill('ready'), 'the queued jobs ran once slots freed up');
});
