// Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath) as TRL's GRPOTrainer computes it
// (loss_type "grpo", one policy update per generation batch). Rows {prompt, answer}. Per micro-batch:
//   1. each prompt gets `group_size` completions sampled by the serving engine (src/runtime: the decoder
//      scheduler's continuous batching and paged KV cache) with the adapter being trained applied; the
//      engine's copy of the adapter is refreshed after every optimizer step;
//   2. rewards r ∈ [0,1] from src/rl/rewards (computeRewards: the nine reward types; llm_as_judge through
//      the service's judge); advantages per group A = (r − mean) / (std + 1e-4) (std unbiased, as torch);
//   3. per completion token t of sequence i, with π the policy (LoRA on, gradient), π_old the policy that
//      sampled (= π detached), π_ref the base (adapter off, no gradient), all log-probs of logits divided
//      by the sampling temperature (as TRL):
//        ρ = exp(logπ − logπ_old),  L_t = −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A) + β·KL_t,
//        KL_t = exp(logπ_ref − logπ) − (logπ_ref − logπ) − 1   (the k3 estimator)
//      loss = mean over sequences of (mean over the sequence's completion tokens of L_t).
// Its gradient w.r.t. each token's log-prob goes to the graph's backward.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  loadDecoder,
  type DecoderModel,
  type GenerateFinal,
  type GenerateRequest,
} from '../../runtime/generate.ts';
import { kvBudget } from '../../runtime/kv-budget.ts';
import { DEFAULT_BLOCK_SIZE } from '../../runtime/kv-cache.ts';
import { computeRewards, type RewardItem } from '../../rl/rewards/index.ts';
import type { DataRecord, GrpoRecord } from '../data/formats.ts';
import { log, TrainingConfigError } from '../common.ts';
import { packScored, promptIds, promptText, type ScoredSequence } from './prompt.ts';
import type { DecoderTrainGraph } from '../native.ts';
import type { AlgorithmRun, DecoderAlgorithm } from './types.ts';

/** Group-normalised advantages: rewards in groups of `g` consecutive completions. */
export function grpoAdvantages(rewards: number[], g: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < rewards.length; i += g) {
    const grp = rewards.slice(i, i + g);
    const mean = grp.reduce((a, b) => a + b, 0) / grp.length;
    const v = grp.length > 1 ? grp.reduce((a, b) => a + (b - mean) ** 2, 0) / (grp.length - 1) : 0;
    const std = Math.sqrt(v);
    for (const r of grp) out.push((r - mean) / (std + 1e-4));
  }
  return out;
}

/**
 * KV blocks one group of `n` samples of a `promptLen`-token prompt can hold at most: the first sample's
 * prompt and completion, and each other sample's completion plus the prompt's tail past the full blocks
 * it shares with the first through the prefix cache (sampleGroup).
 */
export function groupBlocks(bs: number, promptLen: number, maxNew: number, maxLen: number, n: number): number {
  const total = Math.min(promptLen + maxNew, maxLen) + 1;
  const shared = Math.floor((promptLen - 1) / bs);
  return Math.ceil(total / bs) + (n - 1) * (Math.ceil(total / bs) - shared);
}

/**
 * `n` samples of one prompt from a serving engine (seed(k) for the k-th). The first prefills the prompt with
 * automatic prefix caching; the others are submitted once its prompt is in the cache (its first token), so
 * they share the prompt's full KV blocks, copy the first's prompt tail (PrefixCache.matchAutomatic) and
 * compute only the prompt's last token: the prompt is computed once per group, not n times (transformers'
 * generate with num_return_sequences repeats it n times).
 */
export function sampleGroup(
  engine: DecoderModel,
  req: GenerateRequest,
  n: number,
  seed: (k: number) => number,
): Promise<GenerateFinal>[] {
  const one = (k: number) => engine.generate({ ...req, seed: seed(k), cache: { mode: 'automatic' } });
  const lead = one(0);
  let started!: () => void;
  const prefilled = new Promise<void>((r) => (started = r));
  // read the lead to its end (leaving the loop early would cancel it); its first event means its prompt is cached
  void (async () => {
    try {
      for await (const _ of lead) started();
    } catch {
      // the lead failed or was stopped: the others start anyway and meet the same fate
    } finally {
      started();
    }
  })();
  return [lead.result, ...Array.from({ length: n - 1 }, (_, k) => prefilled.then(() => one(k + 1).result))];
}

export interface GrpoTokenInput {
  /** per row of the packed batch */
  logp: ArrayLike<number>;
  oldLogp: ArrayLike<number>;
  refLogp: ArrayLike<number>;
  /** per sequence: its completion rows, and its advantage */
  rows: number[][];
  advantages: number[];
  beta: number;
  epsilon: number;
}

/** The GRPO loss, its gradient w.r.t. each row's log-prob, and the logged statistics. */
export function grpoLoss(x: GrpoTokenInput): { loss: number; dlogp: Float32Array; kl: number; clipRatio: number } {
  const dlogp = new Float32Array(x.logp.length);
  const B = x.rows.length;
  let loss = 0,
    klSum = 0,
    clipped = 0,
    tokens = 0;
  x.rows.forEach((rows, i) => {
    const A = x.advantages[i];
    const w = 1 / Math.max(rows.length, 1) / B;
    let seq = 0;
    for (const t of rows) {
      const lp = x.logp[t];
      const ratio = Math.exp(lp - x.oldLogp[t]);
      const clippedRatio = Math.min(Math.max(ratio, 1 - x.epsilon), 1 + x.epsilon);
      const l1 = ratio * A;
      const l2 = clippedRatio * A;
      // −min(l1, l2): the unclipped term (or an equal one) passes d/dlogπ = −A·ρ; a clipped one passes 0
      let d = l1 <= l2 ? -A * ratio : 0;
      if (l1 > l2) clipped++;
      let lt = -Math.min(l1, l2);
      const diff = x.refLogp[t] - lp;
      const kl = Math.exp(diff) - diff - 1;
      lt += x.beta * kl;
      d += x.beta * (1 - Math.exp(diff));
      klSum += kl;
      seq += lt;
      dlogp[t] = d * w;
      tokens++;
    }
    loss += seq * w;
  });
  return { loss, dlogp, kl: tokens ? klSum / tokens : 0, clipRatio: tokens ? clipped / tokens : 0 };
}

/**
 * One GRPO micro-step on sampled sequences (prompt + completion) with their advantages: the policy's
 * log-probs at `temperature` (kept for backward), the reference's (adapter off), the loss (old log-probs =
 * the policy's, detached, unless given per completion token) and backward of gradScale × the loss.
 */
export async function grpoStep(
  g: DecoderTrainGraph,
  seqs: ScoredSequence[],
  advantages: number[],
  o: {
    beta: number;
    epsilon: number;
    temperature: number;
    gradScale: number;
    seed: number;
    oldLogps?: number[][];
  },
): Promise<{ loss: number; kl: number; clipRatio: number; tokens: number }> {
  const packed = packScored(seqs);
  const { logp } = await g.forward(packed.batch, { seed: o.seed, temperature: o.temperature });
  // the reference (adapter off) is scored even at beta 0: its KL is logged
  const { logp: ref } = await g.forward(packed.batch, { lora: false, keep: false, temperature: o.temperature });
  let old: ArrayLike<number> = logp;
  if (o.oldLogps) {
    const a = Float32Array.from(logp);
    packed.rows.forEach((rows, i) => rows.forEach((r, k) => (a[r] = o.oldLogps![i][k])));
    old = a;
  }
  const res = grpoLoss({
    logp,
    oldLogp: old,
    refLogp: ref,
    rows: packed.rows,
    advantages,
    beta: o.beta,
    epsilon: o.epsilon,
  });
  if (o.gradScale !== 1) for (let i = 0; i < res.dlogp.length; i++) res.dlogp[i] *= o.gradScale;
  await g.backward(res.dlogp);
  return { loss: res.loss, kl: res.kl, clipRatio: res.clipRatio, tokens: packed.tokens };
}

interface Prompt {
  ids: number[];
  text: string;
  answer: string;
}

interface Window {
  n: number;
  rewardSum: number;
  rewardSq: number;
  kl: number;
  loss: number;
  len: number;
  micro: number;
  errors: number;
}
const emptyWindow = (): Window => ({ n: 0, rewardSum: 0, rewardSq: 0, kl: 0, loss: 0, len: 0, micro: 0, errors: 0 });

export const grpo: DecoderAlgorithm = {
  name: 'grpo',
  recordKinds: ['grpo'],
  async prepare(run, trainRecs, valRecs): Promise<AlgorithmRun<Prompt>> {
    const rl = run.rl!;
    if (!rl.reward_type) throw new TrainingConfigError('grpo needs rl_config.reward_type');
    const G = rl.group_size;
    let skipped = 0;
    const toPrompts = (recs: DataRecord[]) => {
      const out: Prompt[] = [];
      for (const r of recs) {
        if (r.kind !== 'grpo') continue;
        const x = r as GrpoRecord;
        const ids = promptIds(run.tok, x.prompt);
        if (ids.length >= run.maxLen) {
          skipped++;
          continue;
        } // no room for a completion
        out.push({ ids, text: promptText(x.prompt), answer: x.answer });
      }
      return out;
    };
    const train = toPrompts(trainRecs);
    const val = toPrompts(valRecs);
    if (!train.length)
      throw new TrainingConfigError(
        `no usable grpo row: ${skipped} prompt(s) longer than the ${run.maxLen}-token context, none left to train on`,
      );
    // the serving engine with the policy's adapter; its KV pool holds one micro-batch of groups and the
    // blocks it holds come out of the process-wide KV budget the serving models draw from too
    const maxPrompt = Math.max(...train.map((p) => p.ids.length), ...val.map((p) => p.ids.length));
    const need = run.batchSize * groupBlocks(DEFAULT_BLOCK_SIZE, maxPrompt, rl.max_completion_length, run.maxLen, G);
    const engine: DecoderModel = await loadDecoder(run.baseDir, {
      kv: { memory: kvBudget.capacity(), maxBlocks: need, blockSize: DEFAULT_BLOCK_SIZE },
      maxRunning: Math.max(1, run.batchSize * G),
      caching: 'automatic',
    });
    const mib = (b: number) => (b < 2 ** 20 ? `${Math.ceil(b / 1024)} KiB` : `${(b / 2 ** 20).toFixed(1)} MiB`);
    if (engine.kv.numBlocks < need) {
      engine.close();
      throw new TrainingConfigError(
        `GRPO generation needs ${mib(need * engine.kv.blockBytes)} of KV cache for a micro-batch ` +
          `(${run.batchSize} prompt(s) of up to ${maxPrompt} tokens × group_size ${G} × up to ` +
          `${rl.max_completion_length} new tokens, ${engine.kv.dtype}); the process KV budget (LOOM_KV_MEMORY) is ` +
          `${mib(kvBudget.capacity())}: lower batch_size, group_size or max_completion_length, or raise LOOM_KV_MEMORY`,
      );
    }
    log(
      run.hooks,
      'info',
      `generation engine: KV pool of ${need} blocks (${mib(need * engine.kv.blockBytes)}, ${engine.kv.dtype}) ` +
        `reserved from the process KV budget (${mib(kvBudget.capacity())}) while a micro-batch generates`,
    );
    const adapterDir = mkdtempSync(join(tmpdir(), 'loom-grpo-policy-'));
    const refresh = () => {
      rmSync(adapterDir, { recursive: true, force: true });
      run.saveAdapter(adapterDir);
      engine.loadAdapter('policy', adapterDir);
    };
    refresh();
    const g = run.graph;
    let win = emptyWindow();
    let round = 0;
    let lastStep = 0;
    // a stop gives the reserved KV back at once (the scheduler frees the sequences' blocks on the same signal)
    const onAbort = () => engine.kv.unhold();
    run.hooks.signal?.addEventListener('abort', onAbort, { once: true });

    const flush = (step: number) => {
      if (!win.n) return;
      const mean = win.rewardSum / win.n;
      const std = Math.sqrt(Math.max(0, win.rewardSq / win.n - mean * mean));
      log(
        run.hooks,
        'info',
        `step ${step}: loss ${(win.loss / win.micro).toFixed(4)}, reward mean ${mean.toFixed(4)}, ` +
          `reward std ${std.toFixed(4)}, kl ${(win.kl / win.micro).toFixed(5)}, ` +
          `completion length ${(win.len / win.micro).toFixed(1)}` +
          (win.errors ? `, ${win.errors} reward error(s) (scored 0)` : ''),
      );
      win = emptyWindow();
    };

    /** Reserves a micro-batch's KV from the process budget, waiting while others hold it (false: stopped). */
    const reserve = async (blocks: number): Promise<boolean> => {
      if (blocks > engine.kv.numBlocks)
        throw new Error(`grpo: ${blocks} KV blocks asked of a ${engine.kv.numBlocks}-block pool`);
      let logged = false;
      while (!engine.kv.hold(blocks)) {
        if (run.hooks.signal?.aborted) return false;
        if (!logged) {
          const st = kvBudget.stats();
          log(
            run.hooks,
            'info',
            `generation waits for ${mib(blocks * engine.kv.blockBytes)} of KV memory ` +
              `(process budget: ${mib(st.used)} of ${mib(st.capacity)} in use)`,
          );
          logged = true;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      return !run.hooks.signal?.aborted;
    };

    /** n samples per prompt from the engine (null when the run was stopped meanwhile) */
    const sample = async (prompts: Prompt[], n: number, seed: number) => {
      const blocks = prompts.reduce(
        (s, p) => s + groupBlocks(engine.kv.blockSize, p.ids.length, rl.max_completion_length, run.maxLen, n),
        0,
      );
      if (!(await reserve(blocks))) return null;
      try {
        const streams = prompts.flatMap((p, i) =>
          sampleGroup(
            engine,
            {
              prompt_ids: p.ids,
              max_tokens: Math.min(rl.max_completion_length, run.maxLen - p.ids.length),
              temperature: rl.sampling_temperature,
              adapter: 'policy',
              signal: run.hooks.signal,
            },
            n,
            (k) => (seed * 7919 + i * 131 + k) >>> 0,
          ),
        );
        const finals = await Promise.allSettled(streams);
        if (run.hooks.signal?.aborted) return null; // every sequence was cancelled: their KV blocks are free
        const bad = finals.find((f) => f.status === 'rejected');
        if (bad) throw (bad as PromiseRejectedResult).reason;
        return finals.map((f) => (f as PromiseFulfilledResult<GenerateFinal>).value);
      } finally {
        engine.kv.unhold();
      }
    };
    const rewardsOf = async (prompts: Prompt[], texts: string[], n: number) => {
      const items: RewardItem[] = texts.map((completion, j) => ({
        prompt: prompts[Math.floor(j / n)].text,
        completion,
        answer: prompts[Math.floor(j / n)].answer,
      }));
      return computeRewards(rl.reward_type!, items, run.rewardContext);
    };

    return {
      items: train,
      describe:
        `${train.length} training / ${val.length} validation prompts` +
        (skipped ? `; ${skipped} skipped (prompt longer than the ${run.maxLen}-token context)` : '') +
        `; GRPO ${rl.reward_type}, group ${G}, kl_beta ${rl.kl_beta}, temperature ${rl.sampling_temperature}, ` +
        `completions up to ${rl.max_completion_length} tokens`,
      async microStep(prompts, o) {
        const gen = await sample(prompts, G, o.seed + round++);
        if (!gen) return { loss: 0, weight: 0, tokens: 0, aborted: true };
        const { rewards, errors } = await rewardsOf(
          prompts,
          gen.map((x) => x.text),
          G,
        );
        const adv = grpoAdvantages(rewards, G);
        const seqs = gen.map((x, j) => ({ prompt: prompts[Math.floor(j / G)].ids, completion: x.tokenIds }));
        const res = await grpoStep(g, seqs, adv, {
          beta: rl.kl_beta,
          epsilon: rl.clip_epsilon,
          temperature: rl.sampling_temperature,
          gradScale: o.gradScale,
          seed: o.seed,
        });
        for (const r of rewards) ((win.rewardSum += r), (win.rewardSq += r * r));
        win.n += rewards.length;
        win.errors += errors.filter((e) => e !== null).length;
        win.kl += res.kl;
        win.loss += res.loss;
        win.len += gen.reduce((s, x) => s + x.tokenIds.length, 0) / gen.length;
        win.micro++;
        return { loss: res.loss, weight: 1, tokens: res.tokens };
      },
      async evaluate() {
        if (!val.length) return null;
        // batch_size prompts at a time: one sample each fits the pool sized for batch_size groups
        const rewards: number[] = [];
        for (let i = 0; i < val.length; i += run.batchSize) {
          const part = val.slice(i, i + run.batchSize);
          const gen = await sample(part, 1, run.seed + 0x51ed + i);
          if (!gen) return null;
          const r = await rewardsOf(
            part,
            gen.map((x) => x.text),
            1,
          );
          rewards.push(...r.rewards);
        }
        log(
          run.hooks,
          'info',
          `validation: reward mean ${(rewards.reduce((a, b) => a + b, 0) / rewards.length).toFixed(4)} ` +
            `over ${val.length} prompts (one sample each)`,
        );
        return null;
      },
      async afterStep(step, last) {
        refresh();
        lastStep = step;
        if (step % rl.logging_steps === 0 || last) flush(step);
      },
      async close() {
        flush(lastStep); // a run stopped early: the steps since the last log line
        run.hooks.signal?.removeEventListener('abort', onAbort);
        engine.close(); // fails what is queued or running (a stopped run's generations), freeing their KV blocks
        await engine.scheduler.runExclusive(async () => {}); // and lets a native step still in flight finish
        engine.kv.unhold();
        rmSync(adapterDir, { recursive: true, force: true });
      },
    };
  },
};
