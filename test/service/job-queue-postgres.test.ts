// The durable job queue on PostgreSQL (pg-boss, src/service/jobs/queue.ts) with `loom worker`
// processes: an API process (roles api,inference: no worker role, it enqueues and runs no job) and two workers on one
// throwaway PostgreSQL cluster and one artifacts folder. A training job is run by one worker; a stop
// sent to the API process reaches it; an evaluation is run by a worker; a worker killed with SIGKILL
// mid-job loses it to the other worker, which runs it to completion under the restart rules. An
// upload's processing and generation jobs are run by the workers too (only they have the decoder the
// generation uses), with the per-team generation cap held across both workers.
import t from 'tap';
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { copyFileSync, mkdirSync, symlinkSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { createServices } from '../../src/service/index.ts';
import { openStore } from '../../src/store/index.ts';
import { postgresMissing, startPostgres } from '../helpers/postgres.ts';
import { FakeRuntime } from './fake-runtime.ts';
import { call, type Res } from './helpers.ts';
import { nerLine, poll, uploadDataset } from './customization-helpers.ts';
import { login, makeDataDir, OPEN_RATE_LIMITS, removeDir, ServerProcess, sleep } from '../reliability/helpers.ts';

const missing = postgresMissing();
if (missing) {
  t.test('PostgreSQL job queue', { skip: `skipped: ${missing}` }, async () => {});
} else {
  const pg = await startPostgres();
  const url = await pg.createDb();
  const dataDir = makeDataDir('loom-queue-');
  // the decoder that generation uses, for the workers only: a generation job the API process ran would fail
  const workerModels = join(dataDir, 'worker-models');
  mkdirSync(workerModels, { recursive: true });
  const tinystories = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
  symlinkSync(tinystories, join(workerModels, 'tinystories-656k'));
  const env = {
    LOOM_DATABASE_URL: url, LOOM_DATABASE_POOL: '4', LOOM_JOB_LEASE_S: '2', LOOM_TRAINING_CONCURRENCY: '1',
    LOOM_GENERATION_CONCURRENCY_PER_TEAM: '1',
  };
  // the account, and the store's and the queue's schemas, before any process starts
  const config = { dataDir, databaseUrl: url, workerThreads: 1 };
  const seed = await createServices({ runtime: new FakeRuntime(), config });
  const email = `queue-${process.pid}@example.com`;
  const password = 'correct horse battery';
  const { user, team } = await seed.auth.createUser({ email, password });
  await seed.billing.grant(team.id, 1000); // generation calls the decoder directly: a paid balance
  await seed.close();

  /** a `loom worker` child process (node itself, so a SIGKILL hits the process holding the job) */
  class Worker {
    proc: ChildProcess;
    output = '';
    exit: Promise<unknown>;
    constructor() {
      const cli = join(import.meta.dirname, '../../src/cli/index.ts');
      this.proc = spawn(process.execPath, ['--import', 'tsx', cli, 'worker'], {
        env: {
          ...process.env, ...env, LOOM_DATA_DIR: dataDir, LOOM_WORKER_THREADS: '1', LOOM_LOG_LEVEL: 'warn',
          LOOM_MODELS_DIR: workerModels,
          LOOM_RATE_LIMITS: JSON.stringify(OPEN_RATE_LIMITS),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const on = (d: Buffer) => { this.output += d.toString(); };
      this.proc.stdout!.on('data', on);
      this.proc.stderr!.on('data', on);
      this.exit = new Promise((r) => this.proc.once('exit', r));
    }
    async ready(): Promise<void> {
      for (let i = 0; i < 600 && !/Loom worker /.test(this.output); i++) await sleep(50);
      if (!/Loom worker /.test(this.output)) throw new Error(`worker did not start:\n${this.output.slice(-3000)}`);
    }
    async kill9(): Promise<void> { if (this.proc.exitCode === null) { this.proc.kill('SIGKILL'); await this.exit; } }
  }

  const api = new ServerProcess(dataDir, { ...env, LOOM_ROLE: 'api,inference' });
  const workers = [new Worker(), new Worker()];
  t.teardown(async () => {
    await api.kill9();
    for (const w of workers) await w.kill9();
    await pg.close();
    removeDir(dataDir);
  });
  await Promise.all([api.start(), ...workers.map((w) => w.ready())]);
  const { key } = await login(api.url, { email, password, team_id: team.id, user_id: user.id });
  const K = { key };
  const job = (id: string) => call(api.url, 'GET', `/felix/training-jobs/${id}`, K);
  const logs = async (id: string) =>
    ((await call(api.url, 'GET', `/felix/training-jobs/${id}/logs`, K)).body.logs as Array<{ message: string }>)
      .map((l) => l.message).join('\n');
  /** the worker whose lease owner (`host/pid/random`) the job's "training started" log line names */
  const runner = async (id: string, nth = 1): Promise<Worker | undefined> => {
    const owners = [...(await logs(id)).matchAll(/training started \(worker [^/]+\/(\d+)\//g)].map((m) => Number(m[1]));
    return workers.find((w) => w.proc.pid === owners[nth - 1]);
  };

  const lines = Array.from({ length: 40 }, (_, i) =>
    nerLine(`Person${i % 7} visited City${i % 5} today .`, [[`Person${i % 7}`, 'person'], [`City${i % 5}`, 'city']]))
    .join('\n');
  // processed by a worker: the API process only moves it to `converting` and enqueues it
  const uploaded = await uploadDataset(api.url, key, 'visits', 'ner', 'v.jsonl', lines);
  t.equal(uploaded.body.status, 'ready', 'upload processed');
  const body = {
    base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full',
    batch_size: 4, eval_steps: 1000,
  };
  const create = (extra: object) =>
    call(api.url, 'POST', '/felix/training-jobs', { ...K, body: { ...body, ...extra } });
  const ended = (x: Res) => ['complete', 'failed', 'cancelled'].includes(x.body.status);

  t.test('a worker runs the job; a stop sent to the API process reaches it', async (t) => {
    const r = await create({ nr_epochs: 200, model_name: 'stopped' });
    t.equal(r.status, 200, r.text);
    const id = r.body.id as string;
    const stepping = (x: Res) => x.body.status === 'running' && x.body.current_step > 0;
    const running = await poll(() => job(id), stepping, 60_000, 100);
    t.equal(running.body.status, 'running', 'a worker took it from the queue');
    t.ok(await runner(id), 'one of the two workers runs it (the API process has no worker role)');
    const stop = await call(api.url, 'POST', `/felix/training-jobs/${id}/stop`, K);
    t.equal(stop.status, 200, stop.text);
    let text = '';
    for (let i = 0; i < 200 && !/last checkpoint is kept/.test(text); i++) { await sleep(100); text = await logs(id); }
    t.match(text, /training stopped; the last checkpoint is kept/, 'the worker stopped the trainer');
    t.equal((await job(id)).body.status, 'cancelled');
  });

  t.test('an evaluation goes through the queue to a worker', async (t) => {
    const ev = { base_model: 'baseline/gliner2-init-tiny', dataset_name: 'visits' };
    const r = await call(api.url, 'POST', '/felix/evaluations', { ...K, body: ev });
    t.equal(r.status, 200, r.text);
    const id = r.body.evaluations[0].id as string;
    const get = () => call(api.url, 'GET', `/felix/evaluations/${id}`, K);
    const done = await poll(get, (x) => ['complete', 'failed'].includes(x.body.status), 60_000, 100);
    t.equal(done.body.status, 'complete', `evaluated by a worker (the API process runs none) ${done.body.error ?? ''}`);
    t.equal(done.body.sample_count, 40, 'every example scored');
  });

  t.test('generation jobs run on the workers, one per team at a time over both workers', async (t) => {
    const gen = {
      task_type: 'classification', labels: ['happy', 'sad'], num_examples: 4, model_id: 'tinystories-656k',
    };
    const ids: string[] = [];
    for (const name of ['moods-a', 'moods-b']) {
      const r = await call(api.url, 'POST', '/generate', { ...K, body: { ...gen, dataset_name: name } });
      t.equal(r.status, 200, r.text);
      t.equal(r.body.status, 'queued');
      ids.push(r.body.job_id as string);
    }
    const get = (id: string) => call(api.url, 'GET', `/generate/jobs/${id}`, K);
    let both = 0;
    let states: Res[] = [];
    for (let i = 0; i < 600; i++) {
      states = await Promise.all(ids.map(get));
      if (states.every((x) => x.body.status === 'generating')) both++;
      if (states.every((x) => x.body.status === 'ready' || x.body.status === 'failed')) break;
      await sleep(100);
    }
    for (const x of states) t.match(x.body, { status: 'ready', count: 4, error: null }, 'generated by a worker');
    t.equal(both, 0, 'never both generating at once (LOOM_GENERATION_CONCURRENCY_PER_TEAM=1 over two workers)');
    const v = (await call(api.url, 'GET', '/felix/datasets/moods-b', K)).body.versions;
    const want = { source: 'generate', status: 'ready', size: 4, labels: { happy: 2, sad: 2 } };
    t.match(v, [want], 'its version processed');
  });

  t.test('SIGKILL the worker mid-job: the other one picks it up and completes it', async (t) => {
    // long enough to be killed mid-run on a fast CPU: the tiny model takes several hundred steps a second on a Zen
    // 5, where 5 epochs (45 steps) ended before the API process saw a step (progress is written every 500 ms)
    const r = await create({ nr_epochs: 60, model_name: 'killed' });
    t.equal(r.status, 200, r.text);
    const id = r.body.id as string;
    const stepping = (x: Res) => x.body.status === 'running' && x.body.current_step > 0;
    const running = await poll(() => job(id), stepping, 60_000, 50);
    t.equal(running.body.status, 'running');
    const first = await runner(id);
    t.ok(first, 'a worker runs it');
    await first!.kill9();
    const done = await poll(() => job(id), ended, 60_000, 200);
    t.equal(done.body.status, 'complete', `completed (${done.body.error ?? ''})`);
    const second = await runner(id, 2);
    t.ok(second && second !== first, 'by the other worker');
    const restarted = /stopped while it was running \(epoch \d+, step \d+\): the server restarted or its worker/;
    t.match(await logs(id), restarted, 'the log says what happened');
    const cks = (await call(api.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, K)).body;
    t.ok(cks.count >= 1, `${cks.count} checkpoint(s) of the completed run`);
  });

  t.test('a requested job whose queue message was lost is sent again by the supervisor', async (t) => {
    // a job record committed without its send (the API process died between the two): a copy of the
    // completed job above, requested again, written straight into the store
    const store = await openStore(dataDir, { databaseUrl: url, poolSize: 1 });
    t.teardown(() => store.close());
    const done = (await store.trainingJobs.listByTeam(team.id)).find((j) => j.model_name === 'killed')!;
    const id = randomUUID();
    const old = new Date(Date.now() - 60_000).toISOString();
    await store.tx((tx) => {
      const fields = { id, model_name: 'lost-send', status: 'requested' as const, created_at: old, updated_at: old };
      tx.trainingJobs.put({ ...done, ...fields });
    });
    const r = await poll(() => job(id), ended, 30_000, 200);
    t.equal(r.body.status, 'complete', `a worker ran it (${r.body.error ?? ''})`);
  });

  t.test('an upload whose queue message was lost is sent again by the supervisor and processed', async (t) => {
    // a version moved to `converting` (waiting: no lease) whose send never happened: a copy of `visits`
    // version 1 with its file, written straight into the store
    const store = await openStore(dataDir, { databaseUrl: url, poolSize: 1 });
    t.teardown(() => store.close());
    const d = (await store.datasets.byName(team.id, 'visits'))!;
    const v1 = (await store.datasets.listVersions(d.id)).find((v) => v.version_number === '1')!;
    const id = randomUUID();
    const dir = (vid: string) => join(dataDir, 'datasets', team.id, d.id, vid);
    mkdirSync(dir(id), { recursive: true });
    copyFileSync(join(dir(v1.id), 'raw'), join(dir(id), 'raw'));
    const old = new Date(Date.now() - 60_000).toISOString();
    await store.tx(async (tx) => {
      const cur = (await tx.datasets.get(d.id))!;
      tx.datasets.put({ ...cur, next_version: cur.next_version + 1, latest_version_id: id });
      tx.datasets.putVersion({
        ...v1, id, version_number: String(cur.next_version), status: 'converting', size: 0, kinds: {}, labels: {},
        ready_at: null, created_at: old, updated_at: old,
      });
    });
    const get = () => call(api.url, 'GET', `/felix/datasets/visits/${id}`, K);
    const done = await poll(get, (x) => ['ready', 'failed'].includes(x.body.status), 30_000, 200);
    t.match(done.body, { status: 'ready', size: 40, processing_error: null }, 'a worker processed it');
  });

  t.test('SIGTERM: a worker shuts down cleanly', async (t) => {
    const w = workers.find((x) => x.proc.exitCode === null && x.proc.signalCode === null)!;
    w.proc.kill('SIGTERM');
    const code = await Promise.race([w.exit, sleep(15_000).then(() => 'still running')]);
    t.equal(code, 0, 'exit code 0 (pool, queue and leases closed)');
  });
}
