// GET /inferences with every filter, GET /inferences/:id, feedback rules and labeled examples.
import t from 'tap';
import { call, makeUser, startServer } from './helpers.ts';

const ts = await startServer();
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });
const other = await makeUser(ts, { credits: 100 });
const enc = (text: string, schema: unknown = ['person']) => call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text, schema } });

const ids: string[] = [];
const t0 = new Date().toISOString();
ids.push((await enc('Alice one')).body.inference_id);
await new Promise((r) => setTimeout(r, 15));
const tMid = new Date().toISOString();
ids.push((await enc('Bob two', { classifications: [{ task: 'sentiment', labels: ['pos', 'neg'] }] })).body.inference_id);
ids.push((await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/decoder', messages: [{ role: 'user', content: 'hi there' }] } })).body.inference_id);
await call(ts.url, 'POST', '/inference', { key: other.key, body: { model_id: 'test/encoder', text: 'Alice', schema: ['person'] } });
// a training-job inference and judge scores, written through the store as their producers would
await ts.services.store.tx((t) => t.inferences.setJudgeScore(ids[0], 0.9));
await ts.services.store.tx((t) => t.inferences.setJudgeScore(ids[1], 0.2));
const jobRec = { ...(await ts.services.store.inferences.get(ids[1]))!, id: '00000000-0000-4000-8000-000000000001', training_job_id: 'job-1', model_id: 'job-1', routed_model: 'job-1', project_id: 'p-1', latency_ms: 500, task: 'extraction', llmaj_score: null, created_at: new Date(Date.now() + 5).toISOString() };
await ts.services.store.tx(async (t) => t.inferences.put(jobRec));

const list = (q: string) => call(ts.url, 'GET', `/inferences${q}`, { key: u.key });
const idsOf = (r: { body: { inferences: Array<{ id: string }> } }) => r.body.inferences.map((i) => i.id);

t.test('list: newest first, team-scoped, limit/offset, total', async (t) => {
  const r = await list('');
  t.equal(r.status, 200);
  t.same(idsOf(r), [jobRec.id, ids[2], ids[1], ids[0]]);
  t.equal(r.body.total, 4);
  t.match(r.body, { limit: 50, offset: 0, count: 4 });
  const page = await list('?limit=2&offset=1');
  t.same(idsOf(page), [ids[2], ids[1]]);
  t.equal(page.body.total, 4);
});

t.test('filters: model_id, task, project_id, training_job_id, latency, llmaj score, since/until', async (t) => {
  t.same(idsOf(await list('?model_id=test/decoder')), [ids[2]]);
  t.same(idsOf(await list('?task=ner')), [ids[0]]);
  t.same(idsOf(await list('?task=classification')), [ids[1]]);
  t.same(idsOf(await list('?task=generate')), [ids[2]]);
  t.same(idsOf(await list('?project_id=p-1')), [jobRec.id]);
  t.same(idsOf(await list('?training_job_id=job-1')), [jobRec.id]);
  t.same(idsOf(await list('?latency_min=400')), [jobRec.id]);
  t.same(idsOf(await list('?latency_max=400')), [ids[2], ids[1], ids[0]]);
  t.same(idsOf(await list('?latency_min=500&latency_max=500')), [jobRec.id], 'both bounds inclusive');
  t.same(idsOf(await list('?llmaj_score_min=0.5')), [ids[0]]);
  t.same(idsOf(await list('?llmaj_score_max=0.5')), [ids[1]]);
  t.same(idsOf(await list('?llmaj_score_min=0.2&llmaj_score_max=0.9')), [ids[1], ids[0]]);
  t.same(idsOf(await list(`?since=${tMid}`)), [jobRec.id, ids[2], ids[1]]);
  t.same(idsOf(await list(`?since=${t0}&until=${tMid}`)), [ids[0]]);
  const rec1 = (await ts.services.store.inferences.get(ids[1]))!;
  t.notOk(idsOf(await list(`?until=${rec1.created_at}`)).includes(ids[1]), 'until is exclusive');
  t.ok(idsOf(await list(`?since=${rec1.created_at}`)).includes(ids[1]), 'since is inclusive');
});

t.test('422 for min > max and out-of-range values; 400 for wrong types', async (t) => {
  for (const q of ['?latency_min=10&latency_max=5', '?llmaj_score_min=0.8&llmaj_score_max=0.1']) {
    const r = await list(q);
    t.equal(r.status, 422, q);
    t.same(Object.keys(r.body).sort(), ['detail', 'errors']);
  }
  for (const q of ['?llmaj_score_min=2', '?latency_min=-1', '?limit=0', '?offset=-3']) t.equal((await list(q)).status, 422, q);
  for (const q of ['?limit=ten', '?latency_min=fast', '?since=yesterday', '?limit=1.5']) {
    const r = await list(q);
    t.equal(r.status, 400, q);
    t.same(Object.keys(r.body), ['detail']);
  }
});

t.test('GET /inferences/:id: full record; 404 for another team; 400 for a malformed id', async (t) => {
  const r = await call(ts.url, 'GET', `/inferences/${ids[0]}`, { key: u.key });
  t.equal(r.status, 200);
  t.match(r.body, { id: ids[0], input: { text: 'Alice one' }, schema: ['person'], output: { entities: { person: [{ text: 'Alice', confidence: 0.9, start: 0, end: 5 }] } }, model_id: 'test/encoder', llmaj_score: 0.9 });
  t.type(r.body.created_at, 'string');
  t.equal((await call(ts.url, 'GET', `/inferences/${ids[0]}`, { key: other.key })).status, 404);
  t.equal((await call(ts.url, 'GET', '/inferences/not-an-id', { key: u.key })).status, 400);
});

t.test('feedback: verdict/corrected_output rules, notes limit, 404 before, corrections become labeled examples', async (t) => {
  const fb = (id: string, body: unknown) => call(ts.url, 'POST', `/inferences/${id}/feedback`, { key: u.key, body });
  const none = await call(ts.url, 'GET', `/inferences/${ids[0]}/feedback`, { key: u.key });
  t.equal(none.status, 404);
  t.same(Object.keys(none.body), ['detail']);
  const r422 = [
    await fb(ids[0], { verdict: 'incorrect' }),
    await fb(ids[0], { verdict: 'correct', corrected_output: { entities: { person: [] } } }),
    await fb(ids[0], { verdict: 'maybe' }),
    await fb(ids[0], { verdict: 'correct', notes: 'x'.repeat(5001) }),
    await fb(ids[0], { verdict: 'incorrect', corrected_output: { labels: [] } }),
  ];
  for (const r of r422) { t.equal(r.status, 422); t.type(r.body.detail, 'string'); t.ok(Array.isArray(r.body.errors)); }
  t.equal((await fb('00000000-0000-4000-8000-00000000ffff', { verdict: 'correct' })).status, 404);

  const ok = await fb(ids[0], { verdict: 'correct', corrected_output: null, notes: 'x'.repeat(5000) });
  t.equal(ok.status, 200);
  t.match(ok.body, { inference_id: ids[0], human_verdict: 'correct' });
  t.type(ok.body.human_feedback_at, 'string');
  t.equal((await ts.services.history.labeledExamples(u.team_id)).length, 0);

  const corrected = { entities: { person: ['Alice', 'One'] } };
  const bad = await fb(ids[0], { verdict: 'incorrect', corrected_output: corrected });
  t.equal(bad.status, 200);
  const got = await call(ts.url, 'GET', `/inferences/${ids[0]}/feedback`, { key: u.key });
  t.same(got.body, bad.body, 'GET returns the submitted shape');
  t.equal(got.body.human_verdict, 'incorrect');
  const ex = await ts.services.history.labeledExamples(u.team_id, 'test/encoder');
  t.equal(ex.length, 1);
  t.match(ex[0], { inference_id: ids[0], input: { text: 'Alice one' }, schema: ['person'], output: corrected, task: 'ner' });
  // flipping back to correct withdraws the example
  await fb(ids[0], { verdict: 'correct' });
  t.equal((await ts.services.history.labeledExamples(u.team_id)).length, 0);
});
