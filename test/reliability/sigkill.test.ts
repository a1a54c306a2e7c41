// kill -9 at the worst moments, then a restart on the same LOOM_DATA_DIR (the server process is
// `npm start`'s entry point with the tiny GLiNER2 and TinyStories models): during concurrent billed
// calls, an upload (before, at and just after its last byte), dataset processing, training,
// generation and evaluation. After each restart: nothing the server acknowledged is lost, no job or
// dataset version is stuck (each ends, or resumes under the restart rules in the README), and at the
// end the credits debited equal the usage records exactly.
import t from 'tap';
import { connect } from 'node:net';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.ts';
import { nerLine } from '../service/customization-helpers.ts';
import {
  call,
  DECODER_ID,
  ENCODER_ID,
  login,
  makeDataDir,
  removeDir,
  seedUsers,
  ServerProcess,
  type Session,
  sleep,
  until,
} from './helpers.ts';

const GRANT = 1000;
const dataDir = makeDataDir('loom-rel-kill-');
const [user] = await seedUsers(dataDir, [{ credits: GRANT }]);
const srv = new ServerProcess(dataDir);
await srv.start();
t.teardown(async () => {
  await srv.kill9();
  removeDir(dataDir);
});
const sess: Session = await login(srv.url, user);
const K = { key: sess.key };
const restart = async () => {
  await srv.kill9();
  await srv.start();
};

const PEOPLE = ['Alice', 'Bob', 'Carol', 'Dan', 'Erin', 'Frank', 'Grace', 'Heidi'];
const CITIES = ['Paris', 'Oslo', 'Rome', 'Lima', 'Kyiv', 'Bern', 'Riga', 'Doha'];
const nerData = (n: number) =>
  Array.from({ length: n }, (_, i) =>
    nerLine(`${PEOPLE[i % 8]} lives in ${CITIES[(i * 3) % 8]} , line ${i} .`, [
      [PEOPLE[i % 8], 'person'],
      [CITIES[(i * 3) % 8], 'city'],
    ]),
  ).join('\n') + '\n';
const TERMINAL_VERSION = ['ready', 'failed'];

async function newUpload(name: string) {
  const r = await call(srv.url, 'POST', '/felix/datasets/upload/url', {
    ...K,
    body: { dataset_name: name, dataset_type: 'ner', filename: `${name}.jsonl` },
  });
  if (r.status !== 200) throw new Error(r.text);
  return r.body as { upload_url: string; upload_id: string; version_number: string; version_id: string };
}
/** the server's copy of an upload appeared on disk (<data>/datasets/<team>/<dataset>/<version>/raw) */
function rawFileOf(versionId: string): boolean {
  const teamDir = join(dataDir, 'datasets', sess.team_id);
  if (!existsSync(teamDir)) return false;
  return readdirSync(teamDir).some((d) => existsSync(join(teamDir, d, versionId, 'raw')));
}
const version = (name: string, v: string) => call(srv.url, 'GET', `/felix/datasets/${name}/${v}`, K);
const waitVersion = (name: string, v: string, ms = 60_000) =>
  until(
    () => version(name, v),
    (r) => TERMINAL_VERSION.includes(r.body?.status),
    ms,
    100,
  );
async function uploadAndProcess(name: string, data: string) {
  const u = await newUpload(name);
  const put = await fetch(u.upload_url.replace(/^http:\/\/[^/]+/, srv.url), { method: 'PUT', body: data });
  if (put.status !== 200) throw new Error(`PUT ${put.status}`);
  const p = await call(srv.url, 'POST', '/felix/datasets/upload/process', {
    ...K,
    body: { dataset_name: name, upload_id: u.upload_id },
  });
  if (p.status !== 200) throw new Error(p.text);
  return u;
}

t.test('kill -9 during concurrent billed calls: every acknowledged call survives', async (t) => {
  const acked: string[] = [];
  const calls = [
    ...Array.from({ length: 200 }, (_, i) => ({
      path: '/inference',
      body: { model_id: ENCODER_ID, text: `${PEOPLE[i % 8]} lives in ${CITIES[i % 8]} .`, schema: ['person', 'city'] },
    })),
    ...Array.from({ length: 24 }, () => ({
      path: '/v1/chat/completions',
      body: { model: DECODER_ID, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 400 },
    })),
  ];
  const inflight = calls.map(async (c) => {
    const r = await call(srv.url, 'POST', c.path, { ...K, body: c.body }).catch(() => null);
    if (r?.status === 200) acked.push(r.body.inference_id ?? r.body.x_service.inference_id);
  });
  await until(
    async () => acked.length,
    (n) => n >= 5,
    30_000,
    2,
  );
  await srv.kill9();
  await Promise.all(inflight);
  t.ok(
    acked.length >= 5 && acked.length < calls.length,
    `${acked.length} of ${calls.length} calls acknowledged before the kill`,
  );
  await srv.start();
  for (const id of acked) {
    const r = await call(srv.url, 'GET', `/inferences/${id}`, K);
    t.equal(r.status, 200, `acknowledged inference ${id} is there after the restart`);
  }
});

t.test('kill -9 during an upload: before, at and after the last byte', async (t) => {
  const LINES = 60_000;
  const body = Buffer.from(nerData(LINES)); // ~10 MB
  // 'at' with -1: the kill lands the moment the server starts writing the received file (it has the
  // last byte; the upload is being stored); with 0: right after the last byte left the client
  const rounds = [
    ['before', 300],
    ['at', -1],
    ['at', 0],
    ['after', 0],
  ] as const;
  for (const [when, delay] of rounds) {
    const name = `up-${when}-${delay < 0 ? 'writing' : delay}`;
    const u = await newUpload(name);
    const target = new URL(u.upload_url);
    let acked = false;
    if (when === 'after') {
      const put = await fetch(srv.url + target.pathname + target.search, { method: 'PUT', body });
      acked = put.status === 200;
      t.ok(acked, 'the upload was acknowledged');
      await srv.kill9();
    } else {
      const sock = connect(Number(new URL(srv.url).port), '127.0.0.1');
      sock.on('error', () => {}); // the server dies under it
      await new Promise((r) => sock.once('connect', r));
      sock.write(
        `PUT ${target.pathname}${target.search} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
          `Content-Type: application/octet-stream\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      const part = when === 'before' ? body.subarray(0, body.length - 1000) : body;
      await new Promise<void>((r) => sock.write(part, () => r()));
      if (delay >= 0) await sleep(delay);
      else
        await until(
          async () => rawFileOf(u.version_id),
          (f) => f,
          10_000,
          0,
        );
      await srv.kill9();
      sock.destroy();
    }
    await srv.start();
    // the upload is usable again or failed with a reason, never stuck; an acknowledged one processes
    let v = await version(name, u.version_number);
    t.equal(v.status, 200, v.text);
    let proc = await call(srv.url, 'POST', '/felix/datasets/upload/process', {
      ...K,
      body: { dataset_name: name, upload_id: u.upload_id },
    });
    if (proc.status !== 200 && !acked && v.body.status !== 'failed') {
      const again = await fetch(srv.url + target.pathname + target.search, { method: 'PUT', body });
      t.equal(
        again.status,
        200,
        `${when}: an unacknowledged upload can be sent again (got ${again.status} ${await again.text()})`,
      );
      proc = await call(srv.url, 'POST', '/felix/datasets/upload/process', {
        ...K,
        body: { dataset_name: name, upload_id: u.upload_id },
      });
    }
    v = await waitVersion(name, u.version_number, 120_000);
    if (v.body.status === 'failed') {
      t.ok(!acked, `${when}: only an unacknowledged upload may fail`);
      t.ok(
        typeof v.body.processing_error === 'string' && v.body.processing_error.length > 10,
        `${when}: failed with a reason (${v.body.processing_error})`,
      );
    } else {
      t.equal(proc.status, 200, `${when}: processing started (${proc.text.slice(0, 160)})`);
      t.match(
        v.body,
        { status: 'ready', size: LINES },
        `${when} (${delay < 0 ? 'while the server stores it' : `+${delay} ms`}): the whole file is there`,
      );
    }
  }
});

t.test('kill -9 during dataset processing: the version is processed again after the restart', async (t) => {
  const u = await uploadAndProcess('processing', nerData(60_000));
  const v0 = await version('processing', u.version_number);
  t.ok(['converting', 'validating', 'ready'].includes(v0.body.status), `killed while ${v0.body.status}`);
  await restart();
  const v = await waitVersion('processing', u.version_number, 120_000);
  t.match(v.body, { status: 'ready', size: 60_000 });
});

t.test(
  'kill -9 during training: the job resumes under the restart rules, checkpoints are not duplicated or dangling',
  async (t) => {
    await uploadAndProcess('train', nerData(64));
    t.equal((await waitVersion('train', '1')).body.status, 'ready');
    const epochs = 4;
    const job = await call(srv.url, 'POST', '/felix/training-jobs', {
      ...K,
      body: {
        base_model: 'loom/gliner2-init-tiny',
        datasets: [{ name: 'train' }],
        model_name: 'killed',
        training_type: 'full',
        nr_epochs: epochs,
        batch_size: 8,
        learning_rate: 5e-3,
        encoder_learning_rate: 1e-3,
        seed: 1,
      },
    });
    t.equal(job.status, 200, job.text);
    const id = job.body.id as string;
    for (let kill = 1; kill <= 2; kill++) {
      // kill once a checkpoint exists (so a duplicate would show), then again early in the rerun
      const cks = () => call(srv.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, K);
      if (kill === 1) await until(cks, (r) => r.body.count >= 1, 120_000, 50);
      const running = await until(
        () => call(srv.url, 'GET', `/felix/training-jobs/${id}`, K),
        (r) => r.body.status === 'running' && r.body.current_step >= 1,
        120_000,
        50,
      );
      t.equal(
        running.body.status,
        'running',
        `kill ${kill}: killed while running (epoch ${running.body.current_epoch}, step ${running.body.current_step})`,
      );
      await restart();
      const after = await call(srv.url, 'GET', `/felix/training-jobs/${id}`, K);
      t.ok(
        ['requested', 'running'].includes(after.body.status),
        `kill ${kill}: queued again after the restart (${after.body.status})`,
      );
    }
    const done = await until(
      () => call(srv.url, 'GET', `/felix/training-jobs/${id}`, K),
      (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status),
      240_000,
      200,
    );
    t.equal(done.body.status, 'complete', `the job completed after two kills (${done.body.error ?? ''})`);
    const logs = (await call(srv.url, 'GET', `/felix/training-jobs/${id}/logs`, K)).body.logs
      .map((l: { message: string }) => l.message)
      .join('\n');
    t.match(logs, /server restarted/, 'the log says what happened');
    const cks = (await call(srv.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, K)).body.checkpoints as Array<{
      id: string;
      epoch: number;
    }>;
    t.equal(cks.length, epochs, `one checkpoint per epoch (${cks.map((c) => c.epoch).join(',')})`);
    t.equal(new Set(cks.map((c) => c.epoch)).size, cks.length, 'no two checkpoints for one epoch');
    for (const c of cks) {
      const r = await call(srv.url, 'POST', '/felix/training-jobs', {
        ...K,
        body: {
          base_model: c.id,
          datasets: [{ name: 'train' }],
          model_name: 'from-ck',
          training_type: 'full',
          nr_epochs: 1,
          max_steps: 1,
        },
      });
      t.equal(r.status, 200, `checkpoint ${c.epoch} has its weights (usable as a base model: ${r.text.slice(0, 120)})`);
      if (r.status !== 200) continue;
      const d = await until(
        () => call(srv.url, 'GET', `/felix/training-jobs/${r.body.id}`, K),
        (x) => ['complete', 'failed', 'cancelled'].includes(x.body.status),
        120_000,
        200,
      );
      t.equal(d.body.status, 'complete', `a job from checkpoint ${c.epoch} trains (${d.body.error ?? ''})`);
    }
  },
);

t.test('kill -9 during generation and evaluation: neither is left stuck', async (t) => {
  const gen = await call(srv.url, 'POST', '/generate', {
    ...K,
    body: {
      task_type: 'ner',
      dataset_name: 'generated',
      num_examples: 30,
      labels: ['person'],
      model_id: DECODER_ID,
      labeling_model_id: ENCODER_ID,
    },
  });
  t.equal(gen.status, 200, gen.text);
  await until(
    () => call(srv.url, 'GET', `/generate/jobs/${gen.body.job_id}`, K),
    (r) => r.body.status !== 'queued',
    30_000,
    20,
  );
  const ev = await call(srv.url, 'POST', '/felix/evaluations', {
    ...K,
    body: { base_model: ENCODER_ID, dataset_name: 'train' },
  });
  t.equal(ev.status, 200, ev.text);
  const evId = ev.body.evaluations[0].id;
  await sleep(200);
  await restart();
  const g = await until(
    () => call(srv.url, 'GET', `/generate/jobs/${gen.body.job_id}`, K),
    (r) => ['ready', 'failed'].includes(r.body.status),
    60_000,
    100,
  );
  t.ok(['ready', 'failed'].includes(g.body.status), `generation ended: ${g.body.status}`);
  if (g.body.status === 'failed') t.match(g.body.error, /restart/, 'with the restart as the reason');
  const e = await until(
    () => call(srv.url, 'GET', `/felix/evaluations/${evId}`, K),
    (r) => ['complete', 'failed'].includes(r.body.status),
    180_000,
    200,
  );
  t.equal(e.body.status, 'complete', 'the evaluation ran again to completion');
  t.ok(e.body.sample_count > 0, `${e.body.sample_count} examples evaluated`);
});

t.test('after every kill: credits equal the usage records, nothing in flight', async (t) => {
  await srv.stop();
  const store = await openStore(dataDir);
  try {
    const acct = (await store.accounts.get(sess.team_id))!;
    const usage = (await store.usage.listByTeam(sess.team_id));
    const spent = usage.reduce((n, u) => n + u.cost_micro, 0);
    // the billed-calls test kills the server once 5 calls are acknowledged; how many more commit first is a race
    t.ok(usage.length >= 5, `${usage.length} usage records (at least the 5 acknowledged before the kill)`);
    t.equal(acct.total_spent_micro, spent, 'amount debited = sum of the usage records');
    const available = acct.free_allowance_micro + acct.included_micro + acct.paid_balance_micro;
    t.equal(available, (100 + GRANT) * 1e6 - spent, 'free allowance + grant − usage = available');
    for (const u of usage)
      if (u.inference_id) t.ok((await store.inferences.get(u.inference_id)), `usage ${u.id} has its inference record`);
    for (const j of (await store.trainingJobs.listByTeam(sess.team_id))) {
      t.ok(
        ['complete', 'failed', 'cancelled', 'deployed'].includes(j.status),
        `training job ${j.model_name} ended (${j.status})`,
      );
      for (const c of (await store.trainingArtifacts.listCheckpoints(j.id)))
        t.ok(existsSync(c.dir), `checkpoint ${j.model_name}/epoch ${c.epoch} points at a folder that exists`);
    }
    for (const g of (await store.generationJobs.all()))
      t.ok(['ready', 'failed'].includes(g.status), `generation job ended (${g.status})`);
    for (const e of (await store.evaluations.listByTeam(sess.team_id)))
      t.ok(['complete', 'failed'].includes(e.status), `evaluation ended (${e.status})`);
    for (const v of (await store.datasets.allVersions()))
      t.notOk(
        ['uploading', 'converting', 'validating'].includes(v.status),
        `dataset ${v.dataset_name} v${v.version_number} not stuck (${v.status})`,
      );
  } finally {
    await store.close();
  }
});
