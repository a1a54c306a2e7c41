// Evaluations through HTTP over real models (the repository's tiny GLiNER2 and TinyStories
// checkpoints served by runtime-local): results are checked against known answers — a dataset
// labeled with the model's own predictions scores exactly 1, the same spans shifted by one
// character score 0 (strict matching), a classifier that always answers "negative" on a 50/50
// dataset has accuracy 0.5 and macro-F1 1/3 — plus baselines, decoder token-F1, list/filter,
// delete, and every error status with its body.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { poll, uploadDataset } from './customization-helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const ENC = join(shared, 'goldens/gliner2-tiny-span');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-eval-models-'));
symlinkSync(ENC, join(modelsDir, 'gliner2-tiny-span'));
symlinkSync(join(shared, 'models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => { await ts.close(); rmSync(modelsDir, { recursive: true, force: true }); });
const u = await makeUser(ts, { credits: 10 });

const TEXTS = ['Alice lives in Paris', 'Bob works for Acme in Berlin', 'Carol met David in Rome yesterday', 'The weather was nice'];
const LABELS = ['city', 'person']; // sorted: the evaluation asks for the dataset's labels in this order
const enc = await loadEncoder(ENC);
const preds = await enc.extract(TEXTS, { entities: LABELS }, { threshold: 0.3, include_spans: true, include_confidence: false });
const spansOf = (i: number, shift = 0) => Object.entries(preds[i].entities ?? {}).flatMap(([label, es]) => [es].flat().filter(Boolean).map((e) => ({ start: e!.start! + shift, end: e!.end! + shift, label })));
const self = TEXTS.map((text, i) => JSON.stringify({ text, entities: spansOf(i).sort((a, b) => a.start - b.start || a.end - b.end) })).join('\n');
const shifted = TEXTS.map((text, i) => JSON.stringify({ text: text + '  ', entities: spansOf(i, 1).filter((s) => s.end <= text.length + 2).sort((a, b) => a.start - b.start || a.end - b.end) })).join('\n');

const evaluate = async (body: object) => {
  const r = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body });
  if (r.status !== 200) return r;
  return poll(() => call(ts.url, 'GET', `/felix/evaluations/${r.body.evaluations[0].id}`, { key: u.key }), (x) => x.body.status === 'complete' || x.body.status === 'failed', 60_000);
};

t.test('entity evaluation: strict spans, micro-averaged, per label', async (t) => {
  const total = TEXTS.reduce((n, _, i) => n + spansOf(i).length, 0);
  t.ok(total > 0, 'the model predicts some spans at threshold 0.3');
  t.equal((await uploadDataset(ts.url, u.key, 'self', 'ner', 'self.jsonl', self)).body.status, 'ready');
  const r = await evaluate({ base_model: 'gliner2-tiny-span', dataset_name: 'self', threshold: 0.3 });
  t.match(r.body, { status: 'complete', f1_score: 1, precision_score: 1, recall_score: 1, sample_count: 4, task: 'ner', base_model: 'gliner2-tiny-span', dataset_name: 'self', dataset_version: '1' });
  t.type(r.body.completed_at, 'string');
  for (const l of LABELS) if (r.body.per_label[l]) t.match(r.body.per_label[l], { precision: 1, recall: 1, f1: 1 });

  t.equal((await uploadDataset(ts.url, u.key, 'shifted', 'ner', 'shifted.jsonl', shifted)).body.status, 'ready');
  const s = await evaluate({ base_model: 'gliner2-tiny-span', dataset_name: 'shifted', threshold: 0.3 });
  t.match(s.body, { status: 'complete', f1_score: 0, precision_score: 0, recall_score: 0, sample_count: 4 }, 'off by one character is a miss');
});

t.test('classification: accuracy and macro-F1', async (t) => {
  const data = ['great movie', 'loved it', 'wonderful', 'awful', 'boring', 'bad acting'].map((text, i) => JSON.stringify({ text, label: i < 3 ? 'positive' : 'negative' })).join('\n');
  t.equal((await uploadDataset(ts.url, u.key, 'sentiment', 'classification', 's.jsonl', data)).body.status, 'ready');
  const r = await evaluate({ base_model: 'gliner2-tiny-span', dataset_name: 'sentiment' });
  // this untrained tiny model answers the same class for every text (confidence ~0.9999)
  t.match(r.body, { status: 'complete', task: 'classification', accuracy: 0.5, sample_count: 6 });
  t.equal(r.body.macro_f1, Math.round((1 / 3) * 1e6) / 1e6);
  t.equal(r.body.f1_score, r.body.macro_f1);
  const per = Object.values(r.body.per_label as Record<string, { precision: number; recall: number; f1: number }>).sort((a, b) => b.f1 - a.f1);
  t.match(per, [{ precision: 0.5, recall: 1, f1: 0.666667 }, { precision: 0, recall: 0, f1: 0 }], 'the answered class: P 1/2, R 1; the other: 0');
});

t.test('decoder: token-overlap F1 of the replies', async (t) => {
  const chats = ['Once upon a time', 'The little dog', 'Tom had a ball'].map((c) => JSON.stringify({ messages: [{ role: 'user', content: c }, { role: 'assistant', content: 'there was a little girl who liked to play' }] })).join('\n');
  t.equal((await uploadDataset(ts.url, u.key, 'stories', 'decoder', 'c.jsonl', chats)).body.status, 'ready');
  const r = await evaluate({ base_model: 'tinystories-656k', dataset_name: 'stories' });
  t.match(r.body, { status: 'complete', task: 'decoder', sample_count: 3 });
  t.ok(r.body.f1_score >= 0 && r.body.f1_score <= 1);
  t.notOk('per_label' in r.body);
  const mismatch = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'tinystories-656k', dataset_name: 'self' } });
  t.equal(mismatch.status, 422);
  t.match(mismatch.body.detail, /decoder/);
});

t.test('baselines, list, filter, get, delete; error statuses', async (t) => {
  const b = await call(ts.url, 'GET', '/felix/baseline-models', { key: u.key });
  t.equal(b.status, 200);
  t.equal(b.body.count, b.body.models.length);
  for (const m of b.body.models) t.same(Object.keys(m).sort(), ['description', 'id', 'name', 'provider']);
  t.ok(b.body.models.some((m: { id: string }) => m.id === 'gliner2-tiny-span'), 'base models on disk are baselines');
  t.ok(b.body.models.some((m: { id: string }) => m.id === 'baseline/gliner2-init-small'));

  const p = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'evals' } })).body;
  const created = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'gliner2-tiny-span', dataset_name: 'self', project_id: p.id, threshold: 0.3 } });
  t.equal(created.status, 200);
  t.match(created.body, { success: true, count: 1, evaluations: [{ id: String, status: 'queued', project_id: p.id }] });
  const id = created.body.evaluations[0].id;
  t.notOk('f1_score' in created.body.evaluations[0], 'no scores before complete');
  const list = await call(ts.url, 'GET', `/felix/evaluations?project_id=${p.id}`, { key: u.key });
  t.match(list.body, { success: true, count: 1, evaluations: [{ id }] });
  t.ok((await call(ts.url, 'GET', '/felix/evaluations', { key: u.key })).body.count >= 5);
  await ts.services.evaluations.idle();
  const del = await call(ts.url, 'DELETE', `/felix/evaluations/${id}`, { key: u.key });
  t.equal(del.status, 200);
  t.same(Object.keys(del.body).sort(), ['message', 'success']);
  t.equal((await call(ts.url, 'GET', `/felix/evaluations/${id}`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'DELETE', `/felix/evaluations/${id}`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'GET', '/felix/evaluations/nope', { key: u.key })).status, 400);

  const noBase = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { dataset_name: 'self' } });
  t.equal(noBase.status, 422);
  t.match(noBase.body, { detail: String, errors: [{ path: '/base_model' }] });
  t.equal((await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'gliner2-tiny-span', dataset_name: 'nope' } })).status, 404);
  t.match((await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'no/model', dataset_name: 'self' } })).body, { detail: /Model no\/model not found/ });
  await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'empty', dataset_type: 'ner', filename: 'e.jsonl' } });
  const notReady = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'gliner2-tiny-span', dataset_name: 'empty' } });
  t.equal(notReady.status, 422);
  t.match(notReady.body.detail, /must be ready/);
  t.equal((await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'gliner2-tiny-span', dataset_name: 'self', project_id: '00000000-0000-4000-8000-000000000000' } })).status, 404);
  t.equal((await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'gliner2-tiny-span', dataset_name: 'self', threshold: 2 } })).status, 422);
  const other = await makeUser(ts);
  t.equal((await call(ts.url, 'GET', '/felix/evaluations', { key: other.key })).body.count, 0, 'per team');
  t.equal((await call(ts.url, 'GET', '/felix/evaluations')).status, 401);
});
