// Cross-team isolation, as a table over every resource and verb: team A owns one of everything
// (keys, project, deployment, datasets and versions, an upload, a complete training job and its
// checkpoints, an evaluation, a generation job, inferences and feedback); team B, with a valid key
// and a valid dashboard session, tries every read and write on each of them. Every attempt is a 404
// (spec section 7: the resource does not exist for B), B's lists never show A's resources, and A
// finds everything unchanged afterwards.
import t from 'tap';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer, type Res, type TestUser } from '../service/helpers.ts';
import { nerLine, poll, uploadDataset } from '../service/customization-helpers.ts';
import { DECODER_ID, ENCODER_ID, errorBodyProblem, makeDataDir, OPEN_RATE_LIMITS, removeDir } from './helpers.ts';

const home = makeDataDir('loom-rel-iso-');
const ts = await startServer({
  runtime: createLocalRuntime({ modelsDir: `${home}/models` }),
  config: { modelsDir: `${home}/models`, rateLimits: OPEN_RATE_LIMITS },
});
t.teardown(async () => {
  await ts.close();
  removeDir(home);
});
const A = await makeUser(ts, { credits: 1000 });
const B = await makeUser(ts, { credits: 1000 });
const as = (u: TestUser) => ({ key: u.key });
const sessionOf = (u: TestUser) => ({ headers: { Cookie: u.cookie, 'X-CSRF-Token': u.csrf } });

const DATA =
  Array.from({ length: 16 }, (_, i) =>
    nerLine(`${['Alice', 'Bob', 'Carol', 'Dan'][i % 4]} lives in ${['Paris', 'Oslo', 'Rome', 'Lima'][i % 4]} .`, [
      [['Alice', 'Bob', 'Carol', 'Dan'][i % 4], 'person'],
      [['Paris', 'Oslo', 'Rome', 'Lima'][i % 4], 'city'],
    ]),
  ).join('\n') + '\n';

t.test("team B never sees or changes team A's resources", async (t) => {
  // ---- team A's resources -----------------------------------------------------------------------
  const keyA2 = (await call(ts.url, 'POST', '/create-api-key', { body: { name: 'second' }, ...sessionOf(A) })).body;
  const ds = await uploadDataset(ts.url, A.key, 'a-people', 'ner', 'a.jsonl', DATA);
  t.equal(ds.body.status, 'ready', ds.text);
  const version = ds.body.version_number as string;
  const pendingUpload = (
    await call(ts.url, 'POST', '/felix/datasets/upload/url', {
      ...as(A),
      body: { dataset_name: 'a-pending', dataset_type: 'ner', filename: 'p.jsonl' },
    })
  ).body;
  const job = await call(ts.url, 'POST', '/felix/training-jobs', {
    ...as(A),
    body: {
      base_model: 'loom/gliner2-init-tiny',
      datasets: [{ name: 'a-people' }],
      model_name: 'a-model',
      training_type: 'full',
      nr_epochs: 1,
      max_steps: 2,
      batch_size: 8,
    },
  });
  t.equal(job.status, 200, job.text);
  const jobId = job.body.id as string;
  const done = await poll(
    () => call(ts.url, 'GET', `/felix/training-jobs/${jobId}`, as(A)),
    (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status),
    180_000,
    200,
  );
  t.equal(done.body.status, 'complete', "A's job trained");
  const ck = (await call(ts.url, 'GET', `/felix/training-jobs/${jobId}/checkpoints`, as(A))).body.checkpoints[0];
  const project = (await call(ts.url, 'POST', '/projects', { ...as(A), body: { name: 'a-project' } })).body;
  const dep = (
    await call(ts.url, 'POST', `/projects/${project.id}/deployments`, { ...as(A), body: { training_job_id: jobId } })
  ).body;
  await ts.services.projects.settle();
  const ev = (
    await call(ts.url, 'POST', '/felix/evaluations', {
      ...as(A),
      body: { base_model: ENCODER_ID, dataset_name: 'a-people' },
    })
  ).body.evaluations[0];
  const gen = (
    await call(ts.url, 'POST', '/generate', {
      ...as(A),
      body: {
        task_type: 'ner',
        dataset_name: 'a-generated',
        num_examples: 1,
        labels: ['person'],
        model_id: DECODER_ID,
        labeling_model_id: ENCODER_ID,
      },
    })
  ).body;
  const inf = (
    await call(ts.url, 'POST', '/inference', {
      ...as(A),
      body: { model_id: ENCODER_ID, text: 'Alice lives in Paris .', schema: ['person'] },
    })
  ).body;
  const chat = (
    await call(ts.url, 'POST', '/v1/chat/completions', {
      ...as(A),
      body: { model: DECODER_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 },
    })
  ).body;
  t.equal(
    (await call(ts.url, 'POST', `/inferences/${inf.inference_id}/feedback`, { ...as(A), body: { verdict: 'correct' } }))
      .status,
    200,
  );
  for (const [what, v] of Object.entries({
    keyA2: keyA2?.id,
    ck: ck?.id,
    project: project?.id,
    dep: dep?.deployment_id,
    ev: ev?.id,
    gen: gen?.job_id,
    inf: inf?.inference_id,
    chat: chat?.x_service?.inference_id,
    upload: pendingUpload?.upload_id,
  })) {
    t.type(v, 'string', `A's ${what} exists`);
  }

  // ---- team B tries everything on them ----------------------------------------------------------
  type Row = [string, string, unknown?];
  const p = `/projects/${project.id}`;
  const j = `/felix/training-jobs/${jobId}`;
  const d = `/felix/datasets/a-people`;
  const table: Row[] = [
    ['DELETE', '/delete-api-key', { key_id: keyA2.id }],
    ['DELETE', '/delete-api-key', { key_id: A.key_id }],
    ['GET', p],
    ['DELETE', p],
    ['POST', `${p}/deployments`, { training_job_id: jobId }],
    ['GET', `${p}/deployments`],
    ['POST', `${p}/inference`, { text: 'Alice lives in Paris .', schema: { entities: ['person'] } }],
    ['GET', d],
    ['GET', `${d}/${version}`],
    ['GET', `${d}/${version}/preview`],
    ['GET', `${d}/${version}/download`],
    ['DELETE', d],
    ['POST', '/felix/datasets/upload/process', { dataset_name: 'a-pending', upload_id: pendingUpload.upload_id }],
    ['GET', j],
    ['GET', `${j}/logs`],
    ['GET', `${j}/checkpoints`],
    ['GET', `${j}/download`],
    ['POST', `${j}/stop`],
    ['DELETE', j],
    ['POST', '/felix/training-jobs', { base_model: jobId, datasets: [{ name: 'a-people' }], model_name: 'steal' }],
    ['POST', '/felix/training-jobs', { base_model: ck.id, datasets: [{ name: 'a-people' }], model_name: 'steal' }],
    ['POST', '/felix/evaluations', { base_model: jobId, dataset_name: 'a-people' }],
    ['POST', '/felix/evaluations', { base_model: ENCODER_ID, dataset_name: 'a-people' }],
    ['GET', `/felix/evaluations/${ev.id}`],
    ['DELETE', `/felix/evaluations/${ev.id}`],
    ['GET', `/generate/jobs/${gen.job_id}`],
    ['GET', `/inferences/${inf.inference_id}`],
    ['GET', `/inferences/${chat.x_service.inference_id}`],
    ['GET', `/inferences/${inf.inference_id}/feedback`],
    ['POST', `/inferences/${inf.inference_id}/feedback`, { verdict: 'incorrect', corrected_output: { entities: [] } }],
    ['POST', `/inferences/${inf.inference_id}/judge`],
    ['GET', `${p}/judge`],
    ['PUT', `${p}/judge`, { model: DECODER_ID, rubric: 'steal' }],
    ['DELETE', `${p}/judge`],
    ['PUT', '/judge', { model: jobId, rubric: "A's trained model is not B's judge" }],
    ['POST', '/inference', { model_id: jobId, text: 'Alice lives in Paris .', schema: ['person'] }],
    ['POST', '/inference', { model_id: ck.id, text: 'Alice lives in Paris .', schema: ['person'] }],
    ['POST', '/gliner-2/extract-entities', { model_id: jobId, text: 'Alice lives in Paris .', entities: ['person'] }],
    ['POST', '/v1/embeddings', { model: jobId, input: 'Alice' }],
    ['GET', `/v1/models/${jobId}`],
  ];
  // B's own project, for deploying A's job into it
  const projB = (await call(ts.url, 'POST', '/projects', { ...as(B), body: { name: 'b-project' } })).body;
  table.push(['POST', `/projects/${projB.id}/deployments`, { training_job_id: jobId }]);
  for (const [method, path, body] of table) {
    for (const [how, auth] of [
      ['key', as(B)],
      ['session', sessionOf(B)],
    ] as const) {
      // key-only routes
      if (how === 'session' && ['/inference', '/gliner-2/extract-entities', '/v1/embeddings'].includes(path)) continue;
      if (how === 'session' && (path.startsWith('/v1/') || path.endsWith('/inference'))) continue;
      const r: Res = await call(ts.url, method, path, { ...auth, body });
      const family = path.startsWith('/v1/') ? 'openai' : 'native';
      t.ok(
        r.status === 404 && errorBodyProblem(family, r.status, r.body, r.headers) === null,
        `B (${how}) ${method} ${path}${body ? ' ' + JSON.stringify(body).slice(0, 80) : ''} → 404 ` +
          `(got ${r.status} ${r.text.slice(0, 120)})`,
      );
    }
  }
  // B's lists never show A's resources
  const lists: Array<[string, string[]]> = [
    ['/list-api-keys', [A.key_id, keyA2.id]],
    ['/projects', [project.id]],
    ['/felix/datasets', ['a-people', 'a-pending', 'a-generated']],
    ['/felix/training-jobs', [jobId]],
    ['/felix/trained-models', [jobId]],
    ['/felix/evaluations', [ev.id]],
    ['/inferences?limit=1000', [inf.inference_id, chat.x_service.inference_id]],
    ['/v1/models', [jobId]],
    ['/base-models', [jobId]],
  ];
  for (const [path, ids] of lists) {
    const r = await call(ts.url, 'GET', path, as(B));
    t.equal(r.status, 200, `B GET ${path}`);
    for (const id of ids) t.notOk(r.text.includes(id), `B GET ${path} does not show A's ${id}`);
  }
  // A finds everything as it was
  t.equal(
    (await call(ts.url, 'GET', '/projects', { key: keyA2.secret_key })).status,
    200,
    "A's second key still works",
  );
  t.equal((await call(ts.url, 'GET', p, as(A))).status, 200);
  t.equal((await call(ts.url, 'GET', `${p}/deployments`, as(A))).body.deployments[0].deployment_id, dep.deployment_id);
  t.equal((await call(ts.url, 'GET', `${d}/${version}`, as(A))).body.status, 'ready');
  t.match((await call(ts.url, 'GET', j, as(A))).body, { status: 'deployed' });
  t.equal((await call(ts.url, 'GET', `/felix/evaluations/${ev.id}`, as(A))).status, 200);
  t.equal((await call(ts.url, 'GET', `/inferences/${inf.inference_id}/feedback`, as(A))).body.human_verdict, 'correct');
  t.equal((await call(ts.url, 'GET', `/generate/jobs/${gen.job_id}`, as(A))).status, 200);
  t.equal(
    (
      await call(ts.url, 'POST', `${p}/inference`, {
        ...as(A),
        body: { text: 'Alice lives in Paris .', schema: { entities: ['person'] } },
      })
    ).status,
    200,
    "A's project still serves",
  );
});
