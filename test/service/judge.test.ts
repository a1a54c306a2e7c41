// LLM-as-judge through the HTTP API on the production runtime: a seeded tiny Qwen2 (random weights,
// greedy, under the JSON constraint: a deterministic outcome) judges encoder (tiny GLiNER2) and
// decoder inferences. Configuration errors, on-demand and background (sampled) judging, the score
// and verdict filters, a batch over a filter, a judge that times out, billing, and the queue
// surviving a restart of the judge service.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { createJudgeService } from '../../src/service/judge/index.ts';
import { computeRewards } from '../../src/rl/rewards/index.ts';
import { startServer, makeUser, call } from './helpers.ts';
import { ENCODER_DIR } from '../compat/tiny-runtime.ts';
import { writeTinyQwen2 } from '../compat/tiny-checkpoint.ts';
import { startChild } from './child-server.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-judge-models-'));
symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
writeTinyQwen2(join(modelsDir, 'tiny-judge'), 7);
const runtime = createLocalRuntime({ modelsDir });
const ts = await startServer({ runtime, config: { modelsDir } });
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 1000 });
const api = (method: string, path: string, body?: unknown) => call(ts.url, method, path, { key: u.key, body });

const RUBRIC = 'Pass when the output answers the input faithfully; fail otherwise.';
const encoderInference = async (text: string, extra: Record<string, unknown> = {}) => {
  const r = await api('POST', '/inference', { model_id: 'gliner2-tiny', text, schema: ['person', 'city'], ...extra });
  if (r.status !== 200) throw new Error(`inference: ${r.status} ${r.text}`);
  return r.body.inference_id as string;
};
const decoderInference = async (content: string) => {
  const r = await api('POST', '/inference', {
    model_id: 'tiny-judge',
    messages: [{ role: 'user', content }],
    max_tokens: 6,
    temperature: 0,
  });
  if (r.status !== 200) throw new Error(`inference: ${r.status} ${r.text}`);
  return r.body.inference_id as string;
};
const get = async (id: string) => (await api('GET', `/inferences/${id}`)).body;
async function waitJudged(ids: string[], timeoutMs = 60_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const recs = await Promise.all(ids.map(get));
    if (recs.every((r) => r.llmaj_judged_at)) return recs;
    if (Date.now() > end)
      throw new Error(`not judged in time: ${recs.filter((r) => !r.llmaj_judged_at).map((r) => r.id)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

t.test('configuration: bad judges are refused, a good one is stored', async (t) => {
  t.equal((await api('GET', '/judge')).status, 404, 'none configured yet');
  const missing = await api('PUT', '/judge', { model: 'no-such-model', rubric: RUBRIC });
  t.equal(missing.status, 404, missing.text);
  const encoder = await api('PUT', '/judge', { model: 'gliner2-tiny', rubric: RUBRIC });
  t.equal(encoder.status, 422, encoder.text);
  t.match(encoder.body.errors[0], { path: '/model' });
  const rate = await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 1.5 });
  t.equal(rate.status, 422, rate.text);
  t.match(JSON.stringify(rate.body.errors), /sample_rate/);
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: -0.1 })).status, 422);
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: '' })).status, 422);
  const ok = await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, score_scale: 10 });
  t.equal(ok.status, 200, ok.text);
  t.match(ok.body, { scope: 'team', model: 'tiny-judge', sample_rate: 0, score_scale: 10, max_retries: 2 });
  t.same((await api('GET', '/judge')).body, ok.body);
  const pr = await api('POST', '/projects', { name: 'judged' });
  t.equal((await api('PUT', `/projects/${pr.body.id}/judge`, { model: 'gliner2-tiny', rubric: RUBRIC })).status, 422);
  t.equal((await api('GET', `/projects/${pr.body.id}/judge`)).status, 404);
});

t.test('on demand: an encoder and a decoder inference are judged, deterministically, and billed', async (t) => {
  const enc = await encoderInference('Ada Lovelace moved to London in 1833.');
  const dec = await decoderInference('Name a city.');
  const before = await get(enc);
  t.equal(before.llmaj_judged_at, null);
  const spent0 = (await api('GET', '/account')).body.credits.total_spent;
  for (const id of [enc, dec]) {
    const r = await api('POST', `/inferences/${id}/judge`);
    t.equal(r.status, 200, r.text);
    t.equal(r.body.llmaj_error, null, `judged without error: ${r.text}`);
    t.ok(['pass', 'fail', 'uncertain'].includes(r.body.llmaj_verdict));
    t.ok(
      r.body.llmaj_score >= 0 && r.body.llmaj_score <= 1 && Number.isInteger(r.body.llmaj_score * 10),
      `score ${r.body.llmaj_score} is k/10`,
    );
    t.type(r.body.llmaj_reasoning, 'string');
    const rec = await get(id);
    t.match(rec, { llmaj_verdict: r.body.llmaj_verdict, llmaj_score: r.body.llmaj_score, llmaj_model: 'tiny-judge' });
    t.ok(rec.llmaj_judged_at);
    // the judge's own call is an inference of the team, billed like any other
    const jc = await get(r.body.llmaj_inference_id);
    t.match(jc, { endpoint: 'judge', task: 'judge', model_id: 'tiny-judge', status: 'success' });
    t.ok(jc.cost > 0 && jc.usage.prompt_tokens > 0, `judge call billed: ${JSON.stringify(jc.usage)} ${jc.cost}`);
    t.equal(jc.llmaj_judged_at, null, 'judge calls are not judged');
    // same judge, same input, greedy: the same judgement
    const again = await api('POST', `/inferences/${id}/judge`);
    t.same(
      [again.body.llmaj_verdict, again.body.llmaj_score, again.body.llmaj_reasoning],
      [r.body.llmaj_verdict, r.body.llmaj_score, r.body.llmaj_reasoning],
    );
  }
  const after = await get(enc);
  t.same(
    {
      ...after,
      ...Object.fromEntries(
        Object.keys(after)
          .filter((k) => k.startsWith('llmaj_'))
          .map((k) => [k, null]),
      ),
    },
    {
      ...before,
      ...Object.fromEntries(
        Object.keys(before)
          .filter((k) => k.startsWith('llmaj_'))
          .map((k) => [k, null]),
      ),
    },
    'only the llmaj_* fields changed',
  );
  const spent1 = (await api('GET', '/account')).body.credits.total_spent;
  const usage = (await ts.services.store.usage.listByTeam(u.team_id)).filter((x) => x.endpoint === 'judge');
  t.equal(usage.length, 4, 'one usage record per judge call');
  const judgeCalls = await api('GET', '/inferences?task=judge&limit=100');
  t.equal(judgeCalls.body.total, 4);
  const judgeCost = judgeCalls.body.inferences.reduce((n: number, r: { cost: number }) => n + r.cost, 0);
  t.ok(
    judgeCost > 0 && Math.abs(spent1 - spent0 - judgeCost) < 1e-9,
    `the account's spend grew by the judge calls' cost: ${spent0} -> ${spent1} (${judgeCost})`,
  );
  t.equal(
    (await api('POST', `/inferences/${judgeCalls.body.inferences[0].id}/judge`)).status,
    409,
    'a judge call is not judged',
  );
});

t.test('background: sampled inferences are judged after they are stored; filters find exactly them', async (t) => {
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 1 })).status, 200);
  const ids = [
    await encoderInference('Grace Hopper worked in Arlington.'),
    await encoderInference('Alan Turing was born in London.'),
    await decoderInference('Tell me a story.'),
    await decoderInference('What is two plus two?'),
  ];
  const unstored = await encoderInference('Nobody should see this text.', { store: false });
  const emb = await api('POST', '/v1/embeddings', { model: 'gliner2-tiny', input: 'Ada Lovelace' });
  t.equal(emb.status, 200, emb.text);
  const embId = (await api('GET', '/inferences?task=embed')).body.inferences[0].id;
  const recs = await waitJudged(ids);
  for (const r of recs) t.ok(r.llmaj_score !== null && r.llmaj_error === null, `${r.id} scored ${r.llmaj_score}`);
  t.equal((await get(unstored)).llmaj_judged_at, null, 'a store:false inference is not judged');
  t.equal((await get(embId)).llmaj_judged_at, null, 'an embedding call is not judged');
  t.equal((await ts.services.judge.pending()), 0, 'queue drained');

  const all = (await api('GET', '/inferences?limit=1000')).body.inferences as {
    id: string;
    llmaj_score: number | null;
    llmaj_verdict: string | null;
  }[];
  const scored = all.filter((r) => r.llmaj_score !== null);
  t.ok(scored.length >= 6);
  const scores = [...new Set(scored.map((r) => r.llmaj_score!))].sort();
  const ranges: [number, number][] = [
    [0, 1],
    [scores[0], scores[0]],
    [scores[scores.length - 1], 1],
    [0, scores[0]],
  ];
  for (const [lo, hi] of ranges) {
    const want = scored
      .filter((r) => r.llmaj_score! >= lo && r.llmaj_score! <= hi)
      .map((r) => r.id)
      .sort();
    const got = (await api('GET', `/inferences?limit=1000&llmaj_score_min=${lo}&llmaj_score_max=${hi}`)).body.inferences
      .map((r: { id: string }) => r.id)
      .sort();
    t.same(got, want, `llmaj_score in [${lo}, ${hi}]: ${want.length} records`);
  }
  for (const v of ['pass', 'fail', 'uncertain']) {
    const want = all
      .filter((r) => r.llmaj_verdict === v)
      .map((r) => r.id)
      .sort();
    const got = (await api('GET', `/inferences?limit=1000&llmaj_verdict=${v}`)).body.inferences
      .map((r: { id: string }) => r.id)
      .sort();
    t.same(got, want, `verdict ${v}`);
  }
  t.equal((await api('GET', '/inferences?llmaj_verdict=maybe')).status, 422);
  t.equal((await api('GET', '/inferences?llmaj_score_min=0.8&llmaj_score_max=0.2')).status, 422);
});

t.test('background judging is off the request path: a slow judge does not delay the inference', async (t) => {
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 1 })).status, 200);
  // judge generations (the ones constrained to the judgement schema) start 1.5 s late
  const generate = runtime.generate.bind(runtime);
  runtime.generate = async function* (ref, params) {
    const rf = params.response_format as { json_schema?: { name?: string } } | undefined;
    if (rf?.json_schema?.name === 'judgement') await new Promise((r) => setTimeout(r, 1500));
    yield* generate(ref, params);
  };
  t.teardown(() => {
    runtime.generate = generate;
  });
  const t0 = Date.now();
  const id = await encoderInference('Edsger Dijkstra lived in Austin.');
  const took = Date.now() - t0;
  t.ok(took < 1000, `the inference answered in ${took} ms`);
  t.equal((await get(id)).llmaj_judged_at, null, 'not judged yet when the reply arrives');
  const [rec] = await waitJudged([id]);
  t.ok(rec.llmaj_score !== null, 'judged afterwards');
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 0 })).status, 200);
});

t.test('batch: the inferences matching a filter are queued and judged', async (t) => {
  t.equal((await api('PUT', '/judge', { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 0 })).status, 200);
  const since = new Date().toISOString();
  const ids = [
    await encoderInference('Marie Curie lived in Paris.'),
    await encoderInference('Niels Bohr lived in Copenhagen.'),
  ];
  t.equal((await get(ids[0])).llmaj_judged_at, null, 'sample rate 0: not judged by itself');
  const bad = await api('POST', '/inferences/judge', { since: 'yesterday' });
  t.equal(bad.status, 422, bad.text);
  const r = await api('POST', '/inferences/judge', { since, task: 'ner' });
  t.equal(r.status, 202, r.text);
  t.match(r.body, { queued: 2, matched: 2 });
  await waitJudged(ids);
});

t.test('a judge that times out leaves the inference unscored with the error; nothing else changes', async (t) => {
  const pr = await api('POST', '/projects', { name: 'slow judge' });
  const cfg = await api('PUT', `/projects/${pr.body.id}/judge`, {
    model: 'tiny-judge',
    rubric: RUBRIC,
    timeout_s: 0.001,
    max_retries: 1,
    retry_backoff_s: 0,
  });
  t.equal(cfg.status, 200, cfg.text);
  const id = await encoderInference('Katherine Johnson worked in Hampton.', { project_id: pr.body.id });
  const before = await get(id);
  const r = await api('POST', `/inferences/${id}/judge`);
  t.equal(r.status, 200, r.text);
  t.match(r.body.llmaj_error, /timed out after 0.001 s \(2 attempts\)/);
  t.equal(r.body.llmaj_score, null);
  t.equal(r.body.llmaj_verdict, null);
  const after = await get(id);
  t.equal(after.llmaj_score, null);
  t.match(after.llmaj_error, /timed out/);
  t.same(
    [after.output, after.input, after.status, after.cost],
    [before.output, before.input, before.status, before.cost],
  );
  const inRange = (await api('GET', `/inferences?limit=1000&llmaj_score_min=0&project_id=${pr.body.id}`)).body
    .inferences;
  t.same(inRange, [], 'an unscored inference is outside every score range');
  t.equal((await api('DELETE', `/projects/${pr.body.id}/judge`)).status, 204);
});

t.test(
  'llm_as_judge rewards: the same judge core scores completions, billed; failures are 0 with the error',
  async (t) => {
    const items = [
      { prompt: 'What is 2 + 2?', completion: '4', answer: '4' },
      { prompt: 'Capital of France?', completion: 'Lyon', answer: 'Paris' },
      { prompt: 'Say hi.', completion: 'Hello!', answer: 'Hi' },
    ];
    const opts = {
      model: 'tiny-judge',
      rubric: 'Pass when the answer matches the reference.',
      scoreScale: 5,
      timeoutS: 30,
      maxConcurrent: 2,
      maxRetries: 0,
      retryBackoffS: 0,
      teamId: u.team_id,
    };
    const judgeUsage = async () => (await ts.services.store.usage.listByTeam(u.team_id)).filter((x) => x.endpoint === 'judge').length;
    const n0 = await judgeUsage();
    const ctx = { judge: ts.services.judge.rewardJudge, judgeOptions: opts };
    // count the judge generations running at once: maxConcurrent bounds them
    let active = 0,
      most = 0;
    const generate = runtime.generate.bind(runtime);
    runtime.generate = async function* (ref, params) {
      most = Math.max(most, ++active);
      try {
        yield* generate(ref, params);
      } finally {
        active--;
      }
    };
    t.teardown(() => {
      runtime.generate = generate;
    });
    const out = await computeRewards('llm_as_judge', items, ctx);
    t.equal(most, 2, 'maxConcurrent 2: two judge calls at once, never three');
    t.same(out.errors, [null, null, null]);
    for (const r of out.rewards)
      t.ok(r >= 0 && r <= 1 && Math.abs(r * 5 - Math.round(r * 5)) < 1e-9, `reward ${r} is k/5`);
    most = 0;
    const again = await computeRewards('llm_as_judge', items, { ...ctx, judgeOptions: { ...opts, maxConcurrent: 1 } });
    t.same(again.rewards, out.rewards, 'greedy judge: same rewards');
    t.equal(most, 1, 'maxConcurrent 1: one at a time');
    t.equal(await judgeUsage(), n0 + 6, 'every judge call is billed');
    const slow = await computeRewards('llm_as_judge', items.slice(0, 2), {
      ...ctx,
      judgeOptions: { ...opts, timeoutS: 0.001 },
    });
    t.same(slow.rewards, [0, 0]);
    for (const e of slow.errors) t.match(e, /timed out after 0.001 s \(1 attempt\)/);
    const gone = await computeRewards('llm_as_judge', items.slice(0, 1), {
      ...ctx,
      judgeOptions: { ...opts, model: 'no-such-judge', maxRetries: 3, retryBackoffS: 5 },
    });
    t.same(gone.rewards, [0]);
    t.match(gone.errors[0], /not found \(1 attempt\)/, 'a missing model is not retried');
  },
);

t.test('restart: queued judgements are kept in the store and judged by the next judge service', async (t) => {
  await ts.services.judge.close(); // the running service stops starting work (as at shutdown)
  const id = await encoderInference('Rosalind Franklin studied in Cambridge.');
  const r = await api('POST', '/inferences/judge', { task: 'ner', limit: 1 });
  t.match(r.body, { queued: 1 });
  await new Promise((res) => setTimeout(res, 200));
  t.equal((await get(id)).llmaj_judged_at, null, 'nothing runs while closed');
  t.equal((await ts.services.judge.pending()), 1, 'the queue entry is in the store');
  const next = createJudgeService({
    store: ts.services.store,
    inference: ts.services.inference,
    runtime,
    catalog: ts.services.catalog,
  });
  t.equal(await next.resumePending(), 1);
  const [rec] = await waitJudged([id]);
  t.ok(rec.llmaj_score !== null, `judged after the restart: ${rec.llmaj_score}`);
  t.equal(await next.pending(), 0);
  await next.close();
});

t.test('kill -9: a sampled inference whose judgement had not run is judged once after the restart', async (t) => {
  // a server process (fake runtime) that SIGKILLs itself as its background judge begins a call
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-judge-kill-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const first = await startChild(dataDir, 'judge-begin');
  const key = first.key!;
  const c = (url: string, method: string, path: string, body?: unknown) => call(url, method, path, { key, body });
  const cfg = { model: 'test/decoder', rubric: RUBRIC, sample_rate: 1, max_retries: 1, retry_backoff_s: 0 };
  t.equal((await c(first.url, 'PUT', '/judge', cfg)).status, 200);
  const inf = await c(first.url, 'POST', '/inference', {
    model_id: 'test/encoder',
    text: 'Ada lives in Paris',
    schema: ['person'],
  }).catch(() => null); // the reply may or may not be out before the process dies
  t.equal(await first.exited, null, 'killed by SIGKILL');
  const second = await startChild(dataDir, '');
  t.teardown(() => second.kill());
  const list = (await c(second.url, 'GET', '/inferences?task=ner')).body;
  t.equal(list.total, 1, 'the inference was stored');
  const id = list.inferences[0].id;
  if (inf?.status === 200) t.equal(inf.body.inference_id, id);
  let rec;
  for (const end = Date.now() + 20_000; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    rec = (await c(second.url, 'GET', `/inferences/${id}`)).body;
    if (rec.llmaj_judged_at) break;
  }
  t.ok(rec.llmaj_judged_at, 'judged after the restart');
  // the fake runtime echoes words, not the judge's JSON: the judgement fails after its 2 attempts
  t.match(rec.llmaj_error, /\(2 attempts\)/);
  t.equal((await c(second.url, 'GET', '/inferences?task=judge')).body.total, 2, 'judged once: two attempts, no more');
  await new Promise((r) => setTimeout(r, 300));
  t.equal((await c(second.url, 'GET', '/inferences?task=judge')).body.total, 2, 'and nothing is queued again');
});
