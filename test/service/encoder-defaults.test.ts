// Contract (issue 13): encoder results carry `confidence`, `start` and `end` unless the caller
// opts out, on every endpoint that returns them: POST /inference, POST /projects/:id/inference,
// POST /gliner-2/*, and the compat `schema` extension. Over HTTP and the production runtime seam
// with the tiny GLiNER2 on disk.
import t, { type Test } from 'tap';
import type { TrainingJobRecord } from '../../src/store/index.ts';
import { newId, nowIso } from '../../src/service/ids.ts';
import { makeUser, call } from './helpers.ts';
import { startLocalEncoderServer } from './local-encoder-server.ts';
import { ENCODER_DIR } from '../compat/tiny-runtime.ts';

const ts = await startLocalEncoderServer();
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });
const TEXT = 'Tim Cook announced the new iPhone at the Apple campus in Cupertino.';
const LABELS = ['person', 'company', 'location'];
const SCHEMA = { entities: LABELS };
const BODY = { model_id: 'gliner2-tiny', text: TEXT, threshold: 0.3 };

type Entity = { text: string; confidence?: number; start?: number; end?: number };
function entities(result: { entities?: Record<string, Entity[]> }): Entity[] {
  return Object.values(result.entities ?? {}).flat();
}
/** Every entity has text, confidence, start and end, and the offsets point at its text. */
function full(t: Test, result: { entities?: Record<string, Entity[]> }, what: string) {
  const es = entities(result);
  t.ok(es.length > 0, `${what}: some entities at threshold 0.3 (${JSON.stringify(result)})`);
  for (const e of es) {
    t.same(Object.keys(e).sort(), ['confidence', 'end', 'start', 'text'], `${what}: ${JSON.stringify(e)}`);
    t.equal(TEXT.slice(e.start, e.end), e.text);
  }
}

t.test('POST /inference: confidence and spans by default; each can be turned off', async (t) => {
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { ...BODY, schema: LABELS } });
  t.equal(r.status, 200, r.text.slice(0, 200));
  full(t, r.body.result, '/inference');
  const rec = await call(ts.url, 'GET', `/inferences/${r.body.inference_id}`, { key: u.key });
  t.same(rec.body.output, r.body.result, 'the stored output is what was returned');
  t.match(rec.body.params, { include_confidence: true, include_spans: true });
  const off = { ...BODY, schema: LABELS, include_confidence: false };
  const noConf = await call(ts.url, 'POST', '/inference', { key: u.key, body: off });
  t.ok(entities(noConf.body.result).every((e) => e.confidence === undefined && typeof e.start === 'number'));
  const spansOff = { ...BODY, schema: LABELS, include_spans: false };
  const noSpans = await call(ts.url, 'POST', '/inference', { key: u.key, body: spansOff });
  t.ok(entities(noSpans.body.result).every((e) => e.start === undefined && typeof e.confidence === 'number'));
});

t.test('POST /projects/:id/inference: the deployed encoder answers with confidence and spans', async (t) => {
  const p = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'defaults' } })).body;
  const job: TrainingJobRecord = {
    id: newId(), team_id: u.team_id, status: 'complete', base_model: 'gliner2-tiny', model_name: 'tiny',
    task_type: 'encoder',
    output_dir: ENCODER_DIR, training_type: 'full', project_id: null, created_at: nowIso(), updated_at: nowIso(),
  };
  await ts.services.store.tx((t) => t.trainingJobs.put(job));
  const deploy = { key: u.key, body: { training_job_id: job.id } };
  const d = await call(ts.url, 'POST', `/projects/${p.id}/deployments`, deploy);
  t.equal(d.status, 200, d.text.slice(0, 200));
  await ts.services.projects.settle();
  const body = { text: TEXT, schema: LABELS, threshold: 0.3 };
  const r = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body });
  t.equal(r.status, 200, r.text.slice(0, 200));
  full(t, r.body.result, '/projects/:id/inference');
});

t.test('POST /gliner-2/extract-entities and /gliner-2/extract', async (t) => {
  for (const [path, body] of [
    ['/gliner-2/extract-entities', { entities: LABELS }],
    ['/gliner-2/extract', { schema: LABELS }],
  ] as const) {
    const r = await call(ts.url, 'POST', path, { key: u.key, body: { ...BODY, ...body } });
    t.equal(r.status, 200, r.text.slice(0, 200));
    full(t, r.body.result, path);
  }
});

t.test('the compat schema extension returns the same entities, with spans', async (t) => {
  const r = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: u.key,
    body: { model: 'gliner2-tiny', messages: [{ role: 'user', content: TEXT }], schema: SCHEMA, threshold: 0.3 },
  });
  t.equal(r.status, 200, r.text.slice(0, 200));
  const result = JSON.parse(r.body.choices[0].message.content);
  full(t, result, '/v1/chat/completions schema');
  const native = await call(ts.url, 'POST', '/inference', { key: u.key, body: { ...BODY, schema: SCHEMA } });
  t.same(result, native.body.result, 'the /inference result');
});
