// Projects and deployments: unique names, 204 delete, deployments of `complete` jobs replacing the
// active one atomically, 409 while provisioning, project inference served by the active deployment.
import t from 'tap';
import type { TrainingJobRecord } from '../../src/store/index.ts';
import { newId, nowIso } from '../../src/service/ids.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';

const rt = new FakeRuntime();
const ts = await startServer({ runtime: rt });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });

async function job(status: TrainingJobRecord['status'], opts: Partial<TrainingJobRecord> = {}): Promise<TrainingJobRecord> {
  const j: TrainingJobRecord = {
    id: newId(), team_id: u.team_id, status, base_model: 'test/encoder', model_name: 'm', task_type: 'encoder', output_dir: null,
    training_type: 'full', project_id: null, created_at: nowIso(), updated_at: nowIso(), ...opts,
  };
  await ts.services.store.tx((t) => t.trainingJobs.put(j));
  return j;
}

t.test('projects: create, unique name (409), list, 422, delete → 204 then 404', async (t) => {
  const p = await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'alpha' } });
  t.equal(p.status, 200);
  t.same(Object.keys(p.body).sort(), ['created_at', 'id', 'name']);
  t.equal((await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'alpha' } })).status, 409);
  t.equal((await call(ts.url, 'POST', '/projects', { key: u.key, body: {} })).status, 422);
  const l = await call(ts.url, 'GET', '/projects', { key: u.key });
  t.same(l.body.projects.map((x: { name: string }) => x.name), ['alpha']);
  const del = await call(ts.url, 'DELETE', `/projects/${p.body.id}`, { key: u.key });
  t.equal(del.status, 204);
  t.equal(del.text, '');
  t.equal((await call(ts.url, 'DELETE', `/projects/${p.body.id}`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'GET', `/projects/${p.body.id}/deployments`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'alpha' } })).status, 200, 'the name is free again');
});

t.test('deployments: complete jobs only; a new deployment replaces the active one; project inference uses it', async (t) => {
  const p = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'beta' } })).body;
  const running = await job('running');
  const r409 = await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: { training_job_id: running.id } });
  t.equal(r409.status, 409);
  t.equal((await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: { training_job_id: newId() } })).status, 404);
  t.equal((await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: {} })).status, 422);
  const none = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { text: 'Alice', schema: { entities: ['person'] } } });
  t.equal(none.status, 404, 'no deployment yet');

  const j1 = await job('complete', { output_dir: '/models/j1' });
  const d1 = await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: { training_job_id: j1.id } });
  t.equal(d1.status, 200);
  t.match(d1.body, { status: 'active', training_job_id: j1.id });
  t.type(d1.body.deployment_id, 'string');
  t.equal((await ts.services.store.trainingJobs.get(j1.id))!.status, 'deployed');
  const inf = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { text: 'Alice in Paris', schema: { entities: ['person', 'city'] } } });
  t.equal(inf.status, 200);
  t.match(inf.body, { type: 'encoder', model_id: j1.id, result: { entities: { person: [{ text: 'Alice', start: 0 }], city: [{ text: 'Paris', start: 9 }] } } });
  const rec = await call(ts.url, 'GET', `/inferences?project_id=${p.id}`, { key: u.key });
  t.same(rec.body.inferences.map((i: { training_job_id: string }) => i.training_job_id), [j1.id]);
  t.equal((await call(ts.url, 'GET', `/inferences?training_job_id=${j1.id}`, { key: u.key })).body.total, 1);

  // a second job whose model must warm: the first keeps serving until the switch, which is atomic
  const j2 = await job('complete', { task_type: 'decoder', base_model: 'test/decoder' });
  rt.states.set(j2.id, { state: 'warming', retry_after_s: 2 });
  const d2 = await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: { training_job_id: j2.id } });
  t.equal(d2.body.status, 'deploying');
  const still = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { text: 'Bob', schema: { entities: ['person'] } } });
  t.equal(still.body.model_id, j1.id, 'the old deployment serves while the new one deploys');
  rt.setReady(j2.id);
  await ts.services.projects.settle();
  const hist = await call(ts.url, 'GET', `/projects/${p.id}/deployments`, { key: u.key });
  t.equal(hist.status, 200);
  t.same(hist.body.deployments.map((d: { deployment_id: string; status: string }) => [d.deployment_id, d.status]), [[d2.body.deployment_id, 'active'], [d1.body.deployment_id, 'inactive']], 'most recent first, one active');
  const gen = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { text: 'hello project', task: 'generate' } });
  t.equal(gen.status, 200);
  t.match(gen.body, { type: 'decoder', model_id: j2.id, result: { content: 'hello project' } });
});

t.test('409 while the only deployment is still provisioning; failed deployments are recorded', async (t) => {
  const p = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'gamma' } })).body;
  const j = await job('complete');
  rt.states.set(j.id, { state: 'warming', retry_after_s: 2 });
  await call(ts.url, 'POST', `/projects/${p.id}/deployments`, { key: u.key, body: { training_job_id: j.id } });
  const r = await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { text: 'Alice', schema: ['person'] } });
  t.equal(r.status, 409);
  t.match(r.body.detail, /provisioning/);
  t.equal((await call(ts.url, 'POST', `/projects/${p.id}/inference`, { key: u.key, body: { schema: ['person'] } })).status, 422, 'text is required');
  // a model served by id while its deployment warms: 425 with Retry-After
  const byId = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: j.id, text: 'Alice', schema: ['person'] } });
  t.equal(byId.status, 425);
  t.equal(byId.headers.get('retry-after'), '2');
  // a job that is not complete cannot serve by id
  const pending = await job('requested');
  t.equal((await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: pending.id, text: 'Alice', schema: ['person'] } })).status, 409);
});
