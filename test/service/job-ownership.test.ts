// Per-job ownership on LMDB (src/service/jobs/leases.ts): two server processes on one data dir.
// A training job runs in A; B starts and leaves it alone (before leases, B's start re-queued it and
// ran it a second time in the same folder); a stop sent through A reaches the job B runs; SIGKILL A
// and B takes A's job over within the lease time and runs it under the restart rules.
import t from 'tap';
import { call, type Res } from './helpers.ts';
import { nerLine, poll, uploadDataset } from './customization-helpers.ts';
import { login, makeDataDir, removeDir, seedUsers, ServerProcess, sleep, until } from '../reliability/helpers.ts';

const LEASE_S = 2;
const dataDir = makeDataDir('loom-own-');
const [user] = await seedUsers(dataDir, [{ credits: 100 }]);
const env = { LOOM_JOB_LEASE_S: String(LEASE_S), LOOM_TRAINING_CONCURRENCY: '1' };
const a = new ServerProcess(dataDir, env);
const b = new ServerProcess(dataDir, env);
t.teardown(async () => {
  await a.kill9();
  await b.kill9();
  removeDir(dataDir);
});
await a.start();
const { key } = await login(a.url, user);
const K = { key };

const lines = Array.from({ length: 40 }, (_, i) =>
  nerLine(`Person${i % 7} visited City${i % 5} today .`, [[`Person${i % 7}`, 'person'], [`City${i % 5}`, 'city']]))
  .join('\n');
t.equal((await uploadDataset(a.url, key, 'visits', 'ner', 'v.jsonl', lines)).body.status, 'ready');
// long enough to outlive the test unless stopped: 200 epochs of 10 steps
const body = {
  base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full',
  nr_epochs: 200, batch_size: 4, eval_steps: 1000,
};
const RESTARTED = /stopped while it was running \(epoch \d+, step \d+\): the server restarted .*; the job is queued/;
const job = (url: string, id: string) => call(url, 'GET', `/felix/training-jobs/${id}`, K);
const logs = async (url: string, id: string) =>
  ((await call(url, 'GET', `/felix/training-jobs/${id}/logs`, K)).body.logs as Array<{ message: string }>)
    .map((l) => l.message).join('\n');
const stepping = (url: string, id: string, after = 0) =>
  poll(() => job(url, id), (r: Res) => r.body.status === 'running' && r.body.current_step > after, 60_000, 100);

t.test('a job running in A is left alone when B starts', async (t) => {
  const j1 = await call(a.url, 'POST', '/felix/training-jobs', { ...K, body: { ...body, model_name: 'in-a' } });
  t.equal(j1.status, 200, j1.text);
  const id = j1.body.id as string;
  const before = await stepping(a.url, id);
  t.equal(before.body.status, 'running');
  await b.start();
  await sleep(2.5 * LEASE_S * 1000); // past two lease lifetimes: A renews, B's supervisor sweeps
  const after = await stepping(b.url, id, before.body.current_step);
  t.equal(after.body.status, 'running', 'still running');
  const [s0, s1] = [before.body.current_step, after.body.current_step];
  t.ok(s1 > s0, `A kept training it (step ${s0} → ${s1})`);
  const text = await logs(b.url, id);
  t.notMatch(text, /queued again/, 'no restart was recorded');
  t.equal((text.match(/training started/g) ?? []).length, 1, 'started once');

  t.test('a stop sent through A reaches the job B runs', async (t) => {
    const j2 = await call(b.url, 'POST', '/felix/training-jobs', { ...K, body: { ...body, model_name: 'in-b' } });
    t.equal(j2.status, 200, j2.text);
    const id2 = j2.body.id as string;
    await stepping(b.url, id2);
    const stop = await call(a.url, 'POST', `/felix/training-jobs/${id2}/stop`, K);
    t.equal(stop.status, 200, stop.text);
    const text = await until(() => logs(a.url, id2), (x) => /last checkpoint is kept/.test(x), 30_000, 200);
    t.match(text, /training stopped; the last checkpoint is kept/, 'the trainer in B stopped and kept its checkpoint');
    t.equal((await job(b.url, id2)).body.status, 'cancelled');
  });

  t.test('SIGKILL A: B takes its job over within the lease time', async (t) => {
    const killedAt = Date.now();
    await a.kill9();
    const again = (r: Res) => r.body.status === 'running' && r.body.started_at !== before.body.started_at;
    const taken = await poll(() => job(b.url, id), again, 30_000, 100);
    const took = Date.now() - killedAt;
    t.equal(taken.body.status, 'running', 'running again');
    t.ok(took < (LEASE_S + 2) * 1000, `taken over and started in ${took} ms (lease ${LEASE_S} s)`);
    t.match(await logs(b.url, id), RESTARTED);
    const stop = await call(b.url, 'POST', `/felix/training-jobs/${id}/stop`, K);
    t.equal(stop.status, 200, stop.text);
    const end = await poll(() => job(b.url, id), (r) => r.body.status === 'cancelled', 10_000, 100);
    t.equal(end.body.status, 'cancelled');
  });
});
