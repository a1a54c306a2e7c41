// DPO / GRPO job creation through HTTP with the queue held (trainingConcurrency 0): rl_config validation
// (required keys, defaults, ranges, unknown keys, keys of the other algorithm: 422 with the path), the base
// (encoders refused naming why; GET /base-models supports_rl), the dataset's row shape (422 naming the first
// bad row) and the llm_as_judge judge model (404 unknown, 422 encoder, 422 when the server has no judge).
// Training itself: test/training/rl-learns.test.ts (e2e through HTTP).
import t from 'tap';
import { call, makeUser, startServer, type TestServer, type TestUser } from './helpers.ts';
import { uploadDataset } from './customization-helpers.ts';

const noJudge = await startServer({ config: { trainingConcurrency: 0 } });
const withJudge = await startServer({
  config: { trainingConcurrency: 0 },
  judge: async (items) => ({ scores: items.map(() => 1), errors: items.map(() => null) }),
});
t.teardown(async () => {
  await noJudge.close();
  await withJudge.close();
});

const DPO =
  '{"prompt": "Say hi", "chosen": "hi", "rejected": "go away"}\n{"prompt": "Say bye", "chosen": "bye", "rejected": "no"}\n';
const GRPO = '{"prompt": "2+2=", "answer": "4"}\n{"prompt": "3+3=", "answer": "6"}\n';
const MIXED = '{"prompt": "2+2=", "answer": "4"}\n{"prompt": "Say hi", "chosen": "hi", "rejected": "go away"}\n';

async function user(ts: TestServer): Promise<TestUser> {
  const u = await makeUser(ts, { credits: 10 });
  for (const [name, content] of [
    ['prefs', DPO],
    ['math', GRPO],
    ['mixed', MIXED],
  ])
    t.equal((await uploadDataset(ts.url, u.key, name, 'decoder', `${name}.jsonl`, content)).body.status, 'ready');
  return u;
}
const post = (ts: TestServer, u: TestUser, body: unknown) =>
  call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body });
const grpoBody = (rl: Record<string, unknown>) => ({
  base_model: 'test/decoder',
  datasets: [{ name: 'math' }],
  training_algorithm: 'grpo',
  rl_config: rl,
});
const dpoBody = (rl: Record<string, unknown>) => ({
  base_model: 'test/decoder',
  datasets: [{ name: 'prefs' }],
  training_algorithm: 'dpo',
  rl_config: rl,
});

t.test('accepted jobs carry every rl_config key with its default', async (t) => {
  const u = await user(noJudge);
  const d = await post(noJudge, u, dpoBody({}));
  t.equal(d.status, 200);
  const dj = (await call(noJudge.url, 'GET', `/felix/training-jobs/${d.body.id}`, { key: u.key })).body;
  t.match(dj, {
    training_algorithm: 'dpo',
    training_type: 'lora',
    configuration: { rl_config: { dpo_beta: 0.1, loss_type: 'sigmoid', logging_steps: 25, max_steps: 0 } },
  });
  const g = await post(noJudge, u, grpoBody({ reward_type: 'numeric_match', group_size: 4 }));
  t.equal(g.status, 200);
  const gj = (await call(noJudge.url, 'GET', `/felix/training-jobs/${g.body.id}`, { key: u.key })).body;
  t.match(gj.configuration.rl_config, {
    reward_type: 'numeric_match',
    group_size: 4,
    kl_beta: 0.04,
    sampling_temperature: 1,
    max_completion_length: 128,
    clip_epsilon: 0.2,
  });
  for (const lt of ['ipo', 'hinge'])
    t.equal((await post(noJudge, u, dpoBody({ loss_type: lt, dpo_beta: 0.5 }))).status, 200, `loss_type ${lt}`);
});

t.test('rl_config problems are 422 with the path', async (t) => {
  const u = await user(noJudge);
  const cases: Array<[unknown, string, RegExp]> = [
    [
      { base_model: 'test/decoder', datasets: [{ name: 'math' }], training_algorithm: 'grpo' },
      '/rl_config',
      /grpo needs rl_config/,
    ],
    [grpoBody({}), '/rl_config/reward_type', /grpo needs rl_config.reward_type/],
    [grpoBody({ reward_type: 'bleu' }), '/rl_config/reward_type', /must be one of exact_match/],
    [grpoBody({ reward_type: 'exact_match', group_size: 1 }), '/rl_config/group_size', /group_size must be >= 2/],
    [grpoBody({ reward_type: 'exact_match', group_size: 2.5 }), '/rl_config/group_size', /must be an integer/],
    [grpoBody({ reward_type: 'exact_match', kl_beta: -1 }), '/rl_config/kl_beta', /kl_beta must be >= 0/],
    [
      grpoBody({ reward_type: 'exact_match', sampling_temperature: 0 }),
      '/rl_config/sampling_temperature',
      /must be > 0/,
    ],
    [
      grpoBody({ reward_type: 'exact_match', max_completion_length: 0 }),
      '/rl_config/max_completion_length',
      /must be >= 1/,
    ],
    [grpoBody({ reward_type: 'exact_match', beta: 0.1 }), '/rl_config/beta', /unknown rl_config key beta/],
    [grpoBody({ reward_type: 'exact_match', dpo_beta: 0.1 }), '/rl_config/dpo_beta', /applies to dpo only/],
    [dpoBody({ dpo_beta: 0 }), '/rl_config/dpo_beta', /dpo_beta must be > 0/],
    [dpoBody({ loss_type: 'kto' }), '/rl_config/loss_type', /sigmoid, ipo, hinge/],
    [dpoBody({ reward_type: 'exact_match' }), '/rl_config/reward_type', /applies to grpo only/],
    [dpoBody({ logging_steps: 0 }), '/rl_config/logging_steps', /logging_steps must be >= 1/],
    [{ ...dpoBody({}), rl_config: [1] }, '/rl_config', /./],
    [
      grpoBody({ reward_type: 'llm_as_judge', llm_judge_model: 'test/decoder' }),
      '/rl_config/llm_judge_rubric',
      /needs rl_config.llm_judge_rubric/,
    ],
  ];
  for (const [body, path, detail] of cases) {
    const r = await post(noJudge, u, body);
    t.equal(r.status, 422, `${path}: ${JSON.stringify((body as { rl_config?: unknown }).rl_config)}`);
    t.match(r.body, { detail, errors: [{ path }] });
  }
  const sft = await post(noJudge, u, {
    base_model: 'test/decoder',
    datasets: [{ name: 'prefs' }],
    rl_config: { dpo_beta: 0.1 },
  });
  t.match(sft.body, { detail: /rl_config must be omitted for sft/, errors: [{ path: '/rl_config' }] });
  const full = await post(noJudge, u, { ...dpoBody({}), training_type: 'full' });
  t.match(full.body, { detail: /LoRA-only/, errors: [{ path: '/training_type' }] });
});

t.test('bases: decoders only, and GET /base-models says so', async (t) => {
  const u = await user(noJudge);
  const models = (await call(noJudge.url, 'GET', '/base-models', { key: u.key })).body.models as Array<{
    id: string;
    task_type: string;
    supports_rl: boolean;
  }>;
  for (const m of models) t.equal(m.supports_rl, m.task_type === 'decoder', `${m.id} supports_rl`);
  t.ok(models.find((m) => m.id === 'test/decoder')?.supports_rl);
  for (const base of ['test/encoder', 'loom/gliner2-init-tiny']) {
    const r = await post(noJudge, u, {
      base_model: base,
      datasets: [{ name: 'prefs' }],
      training_algorithm: 'dpo',
      rl_config: {},
    });
    t.equal(r.status, 422);
    t.match(r.body, {
      detail: /dpo is not supported .* not verified for reinforcement learning; dpo and grpo train decoder models/,
      errors: [{ path: '/training_algorithm', keyword: 'rl_not_supported' }],
    });
  }
});

t.test('datasets of another shape: 422 naming the first bad row', async (t) => {
  const u = await user(noJudge);
  const r = await post(noJudge, u, {
    ...grpoBody({ reward_type: 'exact_match' }),
    datasets: [{ name: 'math' }, { name: 'mixed' }],
  });
  t.equal(r.status, 422);
  t.match(r.body, {
    detail: /dataset mixed: grpo trains on \{prompt, answer\} rows; row 2 is a dpo record/,
    errors: [{ path: '/datasets/1/name' }],
  });
  const d = await post(noJudge, u, { ...dpoBody({}), datasets: [{ name: 'math' }] });
  t.match(d.body, { detail: /row 1 is a grpo record/ });
  const s = await post(noJudge, u, { base_model: 'test/decoder', datasets: [{ name: 'prefs' }] });
  t.match(s.body, { detail: /sft trains on \{messages\} rows; row 1 is a dpo record/ });
});

t.test('llm_as_judge: the judge model is checked at creation', async (t) => {
  const judgeRl = (model: string) =>
    grpoBody({ reward_type: 'llm_as_judge', llm_judge_model: model, llm_judge_rubric: 'Is it right?' });
  const u = await user(withJudge);
  const missing = await post(withJudge, u, judgeRl('no/such-judge'));
  t.equal(missing.status, 404);
  t.match(missing.body.detail, /Judge model no\/such-judge not found/);
  const enc = await post(withJudge, u, judgeRl('test/encoder'));
  t.equal(enc.status, 422);
  t.match(enc.body, {
    detail: /is an encoder/,
    errors: [{ path: '/rl_config/llm_judge_model', keyword: 'judge_not_decoder' }],
  });
  const ok = await post(withJudge, u, judgeRl('test/decoder'));
  t.equal(ok.status, 200);
  // a server started without an injected judge uses its own LLM judge (src/service/judge)
  const u2 = await user(noJudge);
  const own = await post(noJudge, u2, judgeRl('test/decoder'));
  t.equal(own.status, 200);
});
