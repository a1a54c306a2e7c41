// DPO and GRPO end to end through HTTP on the production runtime (runtime-local) with the real trainer and
// tinystories-656k: the model must get measurably better, not only run.
//   DPO (after a short SFT job, continued from its adapter): held-out preference accuracy above 0.5 and a
//   growing chosen-minus-rejected margin (the job's validation log lines), PEFT download, served by id.
//   GRPO with contains_substring: mean reward on held-out prompts, sampled through /v1/completions from the
//   trained model and from the base, rises well above the base's. A stopped GRPO job keeps its weights.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer, type Res } from './helpers.ts';
import { poll, trainingJobEnded, uploadDataset } from './customization-helpers.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-models-'));
symlinkSync(join(import.meta.dirname, '../../../shared/models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
// the service's judge (llm_as_judge rewards): records its calls, scores a completion 1 when it says "cat"
const judgeCalls: Array<{ n: number; opts: Record<string, unknown> }> = [];
const ts = await startServer({
  runtime: createLocalRuntime({ modelsDir }),
  judge: async (items, opts) => {
    judgeCalls.push({ n: items.length, opts: { ...opts } });
    return {
      scores: items.map((it) => (it.completion.toLowerCase().includes('cat') ? 1 : 0)),
      errors: items.map(() => null),
    };
  },
});
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 100 });
const jsonl = (rows: unknown[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
const job = (id: string) => call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key });
const logsOf = async (id: string) =>
  (
    (await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs?limit=1000`, { key: u.key })).body.logs as {
      message: string;
    }[]
  ).map((l) => l.message);
async function finished(t: { fail(m: string): unknown }, id: string, timeoutMs = 240_000): Promise<Res | null> {
  const done = await trainingJobEnded(ts.url, u.key, id, timeoutMs);
  if (done.body.status === 'complete') return done;
  t.fail(`job ended ${done.body.status}: ${done.body.error}\n${(await logsOf(id)).join('\n')}`);
  return null;
}

const NAMES = [
  'Tom',
  'Lily',
  'Sam',
  'Anna',
  'Ben',
  'Mia',
  'Max',
  'Sue',
  'Tim',
  'Amy',
  'Joe',
  'Zoe',
  'Bob',
  'Eve',
  'Dan',
  'Kim',
  'Leo',
  'Ann',
  'Roy',
  'Ivy',
];

t.test('DPO after SFT: held-out preference accuracy above 0.5, margin growing, adapter served', async (t) => {
  const chats = NAMES.slice(0, 8).map((n) => ({
    messages: [
      { role: 'user', content: `Tell me about ${n}.` },
      { role: 'assistant', content: `${n} went to the park.` },
    ],
  }));
  t.equal((await uploadDataset(ts.url, u.key, 'chats', 'decoder', 'chats.jsonl', jsonl(chats))).body.status, 'ready');
  const sft = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'tinystories-656k',
      datasets: [{ name: 'chats' }],
      max_steps: 2,
      lora_r: 4,
      learning_rate: 1e-3,
      validation_data_percentage: 0,
    },
  });
  t.equal(sft.status, 200);
  if (!(await finished(t, sft.body.id))) return;

  const pairs = NAMES.map((n) => ({
    prompt: `Once upon a time, ${n} went to the park.`,
    chosen: ' The sun was bright and everyone was happy.',
    rejected: ' The rain was cold and everyone was sad.',
  }));
  t.equal((await uploadDataset(ts.url, u.key, 'prefs', 'decoder', 'prefs.jsonl', jsonl(pairs))).body.status, 'ready');
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: sft.body.id,
      datasets: [{ name: 'prefs' }],
      model_name: 'happy-endings',
      training_algorithm: 'dpo',
      rl_config: { logging_steps: 1 },
      nr_epochs: 4,
      batch_size: 4,
      learning_rate: 5e-3,
      validation_data_percentage: 25,
      eval_steps: 2,
      seed: 3,
    },
  });
  t.equal(created.status, 200);
  const done = await finished(t, created.body.id);
  if (!done) return;
  t.match(done.body, {
    status: 'complete',
    training_algorithm: 'dpo',
    base_model: sft.body.id,
    progress_percent: 100,
    configuration: { lora_r: 4, rl_config: { dpo_beta: 0.1, loss_type: 'sigmoid' } },
  });
  const logs = await logsOf(created.body.id);
  t.ok(
    logs.some((l) => /rewards\/chosen .* rewards\/rejected .* rewards\/margin .* rewards\/accuracy/.test(l)),
    'training metrics logged every logging_steps',
  );
  const evals = logs
    .map((l) => /^validation: dpo loss ([\d.]+), accuracy ([\d.]+), margin (-?[\d.]+) \((\d+) pairs\)/.exec(l))
    .filter((m) => m !== null);
  t.ok(evals.length >= 3, `${evals.length} validation evaluations`);
  const margins = evals.map((m) => Number(m[3]));
  const last = evals[evals.length - 1];
  t.comment(
    `held-out (${last[4]} pairs): margins ${margins.join(' → ')}, final accuracy ${last[2]}, losses ${evals.map((m) => m[1]).join(' → ')}`,
  );
  t.ok(Number(last[2]) > 0.5, `held-out preference accuracy ${last[2]} > 0.5`);
  t.ok(margins[margins.length - 1] > margins[0] && margins[0] > 0, 'the chosen-minus-rejected margin grows');
  t.ok(Number(last[1]) < Math.log(2), `held-out DPO loss ${last[1]} below log 2 (the untrained value)`);

  const dl = (await call(ts.url, 'GET', `/felix/training-jobs/${created.body.id}/download`, { key: u.key })).body;
  t.equal(dl.format, 'peft_lora');
  const tar = gunzipSync(Buffer.from(await (await fetch(dl.download_url)).arrayBuffer())).toString('latin1');
  t.match(tar, /happy-endings\/adapter_model\.safetensors/);
  const gen = await call(ts.url, 'POST', '/v1/completions', {
    key: u.key,
    body: { model: created.body.id, prompt: 'Once upon a time, Tom went to the park.', max_tokens: 8, temperature: 0 },
  });
  t.equal(gen.status, 200, 'the DPO adapter is served by job id');
});

const ADJ = [
  'little',
  'big',
  'happy',
  'small',
  'sad',
  'kind',
  'shy',
  'brave',
  'old',
  'young',
  'funny',
  'tiny',
  'quiet',
  'busy',
  'lazy',
  'silly',
];
const HELD_OUT = ['gentle', 'proud', 'clever', 'curious'];
const prompt = (a: string) => `Once upon a time, there was a ${a}`;

/** mean contains_substring('cat') reward of n samples per held-out prompt, through /v1/completions */
async function heldOutReward(model: string, n: number): Promise<number> {
  let hits = 0,
    total = 0;
  for (const [i, a] of HELD_OUT.entries()) {
    const r = await call(ts.url, 'POST', '/v1/completions', {
      key: u.key,
      body: { model, prompt: prompt(a), max_tokens: 20, temperature: 1, n, seed: 1000 + 17 * i },
    });
    if (r.status !== 200) throw new Error(`completions ${r.status}: ${r.text}`);
    for (const c of r.body.choices as { text: string }[])
      ((hits += c.text.toLowerCase().includes('cat') ? 1 : 0), total++);
  }
  return hits / total;
}

t.test('GRPO with contains_substring: the held-out reward rises well above the base model', async (t) => {
  t.equal(
    (
      await uploadDataset(
        ts.url,
        u.key,
        'cats',
        'decoder',
        'cats.jsonl',
        jsonl(ADJ.map((a) => ({ prompt: prompt(a), answer: 'cat' }))),
      )
    ).body.status,
    'ready',
  );
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'tinystories-656k',
      datasets: [{ name: 'cats' }],
      model_name: 'cat-stories',
      training_algorithm: 'grpo',
      rl_config: {
        reward_type: 'contains_substring',
        group_size: 16,
        max_completion_length: 20,
        kl_beta: 0.01,
        logging_steps: 2,
      },
      nr_epochs: 4,
      max_steps: 10,
      batch_size: 2,
      learning_rate: 2e-2,
      lora_r: 8,
      lora_alpha: 16,
      lr_scheduler: 'constant',
      warmup_ratio: 0,
      validation_data_percentage: 0,
      seed: 1,
    },
  });
  t.equal(created.status, 200);
  const done = await finished(t, created.body.id);
  if (!done) return;
  t.match(done.body, { status: 'complete', training_algorithm: 'grpo', current_step: 10 });
  const logs = await logsOf(created.body.id);
  const rewards = logs
    .map((l) => /reward mean ([\d.]+), reward std ([\d.]+), kl ([\d.]+)/.exec(l))
    .filter((m) => m !== null)
    .map((m) => Number(m[1]));
  t.ok(rewards.length >= 4, 'reward mean / std and KL logged every logging_steps');
  const base = await heldOutReward('tinystories-656k', 8);
  const trained = await heldOutReward(created.body.id, 8);
  t.comment(
    `training reward ${rewards.join(' → ')}; held-out reward: base ${base.toFixed(3)}, trained ${trained.toFixed(3)} (32 samples each)`,
  );
  t.ok(trained >= base + 0.3 && trained >= 2 * base, `held-out mean reward ${trained} well above the base's ${base}`);
});

t.test('a GRPO job stopped mid-run is cancelled and keeps its last weights', async (t) => {
  t.equal(
    (
      await uploadDataset(
        ts.url,
        u.key,
        'cats-stop',
        'decoder',
        'cats.jsonl',
        jsonl(ADJ.map((a) => ({ prompt: prompt(a), answer: 'cat' }))),
      )
    ).body.status,
    'ready',
  );
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'tinystories-656k',
      datasets: [{ name: 'cats-stop' }],
      training_algorithm: 'grpo',
      rl_config: { reward_type: 'contains_substring', group_size: 4, max_completion_length: 64 },
      nr_epochs: 50,
      batch_size: 2,
      validation_data_percentage: 0,
    },
  });
  t.equal(created.status, 200);
  await poll(
    () => job(created.body.id),
    (r) => r.body.current_step >= 1 || (r.body.status !== 'running' && r.body.status !== 'requested'),
    30_000,
    50,
  );
  const stop = await call(ts.url, 'POST', `/felix/training-jobs/${created.body.id}/stop`, { key: u.key });
  t.equal(stop.status, 200);
  await ts.services.trainingJobs.idle(30_000);
  const j = (await job(created.body.id)).body;
  t.equal(j.status, 'cancelled');
  const cks = (await call(ts.url, 'GET', `/felix/training-jobs/${created.body.id}/checkpoints`, { key: u.key })).body
    .checkpoints;
  t.ok(
    cks.some((c: { is_final: boolean }) => c.is_final),
    'the last weights are kept as the final checkpoint',
  );
  t.match((await logsOf(created.body.id)).join('\n'), /training stopped/);
});

t.test('GRPO with llm_as_judge: the worker asks the service judge, billed to the job team', async (t) => {
  t.equal(
    (
      await uploadDataset(
        ts.url,
        u.key,
        'cats-judge',
        'decoder',
        'cats.jsonl',
        jsonl(ADJ.map((a) => ({ prompt: prompt(a), answer: 'a cat' }))),
      )
    ).body.status,
    'ready',
  );
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'tinystories-656k',
      datasets: [{ name: 'cats-judge' }],
      training_algorithm: 'grpo',
      max_steps: 2,
      batch_size: 2,
      rl_config: {
        reward_type: 'llm_as_judge',
        llm_judge_model: 'tinystories-656k',
        llm_judge_rubric: 'Does it mention a cat?',
        group_size: 4,
        max_completion_length: 16,
        logging_steps: 1,
      },
      validation_data_percentage: 0,
    },
  });
  t.equal(created.status, 200);
  if (!(await finished(t, created.body.id))) return;
  t.equal(judgeCalls.length, 2, 'one judge call per micro-step');
  t.match(judgeCalls[0], {
    n: 8,
    opts: {
      model: 'tinystories-656k',
      rubric: 'Does it mention a cat?',
      scoreScale: 10,
      maxRetries: 2,
      teamId: u.team_id,
    },
  });
  t.match((await logsOf(created.body.id)).join('\n'), /step 2: .*reward mean/);
});
