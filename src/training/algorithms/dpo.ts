// Direct Preference Optimization (Rafailov et al. 2023) on the native decoder graph, as TRL's DPOTrainer
// computes it. Rows {prompt, chosen, rejected}; per pair, the summed log-probabilities of the chosen and
// rejected completion tokens under the policy (base + LoRA, with gradient) and the reference (the same
// graph with the adapter off, no gradient, computed once per pair and kept). With
// h = (π_c − ref_c) − (π_r − ref_r):
//   sigmoid: −log σ(β·h)    hinge: max(0, 1 − β·h)
//   ipo: (h̄ − 1/(2β))², h̄ from the log-ratios averaged per completion token
// chosen / rejected rewards β·(π − ref), margin = their difference, accuracy = P(chosen reward > rejected).
// The loss is a mean over the pairs of a batch; its gradient w.r.t. each completion token's log-prob is
// dL/dπ_seq, fed to the graph's backward.
import type { DataRecord, DpoRecord } from '../data/formats.ts';
import { log, TrainingConfigError } from '../common.ts';
import type { DpoLossType } from './rl-config.ts';
import { completionIds, packScored, promptIds, type ScoredSequence } from './prompt.ts';
import type { AlgorithmRun, DecoderAlgorithm, DecoderRun } from './types.ts';
import type { DecoderTrainGraph } from '../native.ts';

export interface DpoPairLogps {
  /** summed log-probs of the chosen and rejected completions' tokens */
  policyChosen: number;
  policyRejected: number;
  refChosen: number;
  refRejected: number;
  /** completion token counts (ipo averages the log-ratios per token) */
  chosenLen: number;
  rejectedLen: number;
}

export interface DpoPairLoss {
  loss: number;
  /** d loss / d policyChosen and d policyRejected */
  dChosen: number;
  dRejected: number;
  chosenReward: number;
  rejectedReward: number;
}

const softplus = (x: number) => (x > 0 ? x + Math.log1p(Math.exp(-x)) : Math.log1p(Math.exp(x)));
const sigmoid = (x: number) => (x >= 0 ? 1 / (1 + Math.exp(-x)) : Math.exp(x) / (1 + Math.exp(x)));

/** One pair's DPO loss and its gradient (TRL DPOTrainer.dpo_loss, label_smoothing 0). */
export function dpoPairLoss(type: DpoLossType, beta: number, p: DpoPairLogps): DpoPairLoss {
  const c = p.policyChosen - p.refChosen;
  const r = p.policyRejected - p.refRejected;
  const h = c - r;
  let loss: number;
  let dChosen: number;
  let dRejected: number;
  if (type === 'sigmoid') {
    loss = softplus(-beta * h);
    dChosen = -beta * sigmoid(-beta * h);
    dRejected = -dChosen;
  } else if (type === 'hinge') {
    loss = Math.max(0, 1 - beta * h);
    dChosen = 1 - beta * h > 0 ? -beta : 0;
    dRejected = -dChosen;
  } else {
    const lc = Math.max(p.chosenLen, 1),
      lr = Math.max(p.rejectedLen, 1);
    const d = c / lc - r / lr - 1 / (2 * beta);
    loss = d * d;
    dChosen = (2 * d) / lc;
    dRejected = (-2 * d) / lr;
  }
  return {
    loss,
    dChosen,
    dRejected,
    chosenReward: beta * (p.policyChosen - p.refChosen),
    rejectedReward: beta * (p.policyRejected - p.refRejected),
  };
}

export interface Pair {
  chosen: ScoredSequence;
  rejected: ScoredSequence;
  /** reference log-probs of chosen / rejected (filled on first use) */
  ref?: [number, number];
}

/** Per-sequence log-prob: Σ over its completion rows. */
function seqLogps(logp: Float32Array, rows: number[][]): number[] {
  return rows.map((rs) => rs.reduce((s, r) => s + logp[r], 0));
}

/**
 * One DPO micro-step on a batch of pairs: reference log-probs (adapter off, once per pair), the policy's
 * (kept for backward), each pair's loss, and backward of gradScale × the batch mean. Returns each pair's result.
 */
export async function dpoStep(
  g: DecoderTrainGraph,
  pairs: Pair[],
  o: { type: DpoLossType; beta: number; gradScale: number; seed: number },
): Promise<{ results: DpoPairLoss[]; tokens: number }> {
  const packed = packScored(pairs.flatMap((p) => [p.chosen, p.rejected]));
  await refLogps(g, pairs, packed);
  const { logp } = await g.forward(packed.batch, { seed: o.seed });
  const results = scorePairs(o.type, o.beta, pairs, seqLogps(logp, packed.rows));
  const B = pairs.length;
  const dlogp = new Float32Array(logp.length);
  results.forEach((r, i) => {
    for (const row of packed.rows[2 * i]) dlogp[row] = (o.gradScale * r.dChosen) / B;
    for (const row of packed.rows[2 * i + 1]) dlogp[row] = (o.gradScale * r.dRejected) / B;
  });
  await g.backward(dlogp);
  return { results, tokens: packed.tokens };
}

async function refLogps(g: DecoderTrainGraph, pairs: Pair[], packed: ReturnType<typeof packScored>): Promise<void> {
  if (pairs.every((p) => p.ref)) return;
  const { logp } = await g.forward(packed.batch, { lora: false, keep: false });
  const s = seqLogps(logp, packed.rows);
  pairs.forEach((p, i) => (p.ref = [s[2 * i], s[2 * i + 1]]));
}

function scorePairs(type: DpoLossType, beta: number, pairs: Pair[], pol: number[]): DpoPairLoss[] {
  return pairs.map((p, i) =>
    dpoPairLoss(type, beta, {
      policyChosen: pol[2 * i],
      policyRejected: pol[2 * i + 1],
      refChosen: p.ref![0],
      refRejected: p.ref![1],
      chosenLen: p.chosen.completion.length,
      rejectedLen: p.rejected.completion.length,
    }),
  );
}

interface Window {
  n: number;
  loss: number;
  chosen: number;
  rejected: number;
  acc: number;
  steps: number;
}
const emptyWindow = (): Window => ({ n: 0, loss: 0, chosen: 0, rejected: 0, acc: 0, steps: 0 });

function toPairs(run: DecoderRun, recs: DataRecord[]): { pairs: Pair[]; skipped: number } {
  const pairs: Pair[] = [];
  let skipped = 0;
  for (const r of recs) {
    if (r.kind !== 'dpo') continue;
    const x = r as DpoRecord;
    const prompt = promptIds(run.tok, x.prompt);
    const room = run.maxLen - prompt.length;
    if (room < 1) {
      skipped++;
      continue;
    } // the prompt alone fills the context
    const cut = (ids: number[]) => ids.slice(0, room);
    pairs.push({
      chosen: { prompt, completion: cut(completionIds(run.tok, x.chosen)) },
      rejected: { prompt, completion: cut(completionIds(run.tok, x.rejected)) },
    });
  }
  return { pairs, skipped };
}

export const dpo: DecoderAlgorithm = {
  name: 'dpo',
  recordKinds: ['dpo'],
  async prepare(run, trainRecs, valRecs): Promise<AlgorithmRun<Pair>> {
    const rl = run.rl!;
    const beta = rl.dpo_beta;
    const type = rl.loss_type;
    const train = toPairs(run, trainRecs);
    const val = toPairs(run, valRecs);
    if (!train.pairs.length)
      throw new TrainingConfigError(
        `no usable dpo row: ${train.skipped} prompt(s) longer than the ${run.maxLen}-token context, ` +
          'none left to train on',
      );
    const skipped = train.skipped + val.skipped;
    const g = run.graph;
    let win = emptyWindow();
    let lastStep = 0;
    const flush = (step: number) => {
      if (!win.n) return;
      const n = win.n;
      log(
        run.hooks,
        'info',
        `step ${step}: loss ${(win.loss / n).toFixed(4)}, rewards/chosen ${(win.chosen / n).toFixed(4)}, ` +
          `rewards/rejected ${(win.rejected / n).toFixed(4)}, ` +
          `rewards/margin ${((win.chosen - win.rejected) / n).toFixed(4)}, ` +
          `rewards/accuracy ${(win.acc / n).toFixed(3)}`,
      );
      win = emptyWindow();
    };
    return {
      items: train.pairs,
      describe:
        `${train.pairs.length} training / ${val.pairs.length} validation preference pairs` +
        (skipped ? `; ${skipped} skipped (prompt longer than the ${run.maxLen}-token context)` : '') +
        `; DPO ${type}, beta ${beta}`,
      async microStep(pairs, o) {
        const { results: res, tokens } = await dpoStep(g, pairs, { type, beta, gradScale: o.gradScale, seed: o.seed });
        for (const r of res) {
          win.n++;
          win.loss += r.loss;
          win.chosen += r.chosenReward;
          win.rejected += r.rejectedReward;
          win.acc += r.chosenReward > r.rejectedReward ? 1 : 0;
        }
        return { loss: res.reduce((s, r) => s + r.loss, 0), weight: pairs.length, tokens };
      },
      async evaluate() {
        if (!val.pairs.length) return null;
        let loss = 0,
          acc = 0,
          margin = 0;
        for (let i = 0; i < val.pairs.length; i += run.batchSize) {
          const pairs = val.pairs.slice(i, i + run.batchSize);
          const packed = packScored(pairs.flatMap((p) => [p.chosen, p.rejected]));
          await refLogps(g, pairs, packed);
          const { logp } = await g.forward(packed.batch, { keep: false });
          for (const r of scorePairs(type, beta, pairs, seqLogps(logp, packed.rows))) {
            loss += r.loss;
            acc += r.chosenReward > r.rejectedReward ? 1 : 0;
            margin += r.chosenReward - r.rejectedReward;
          }
        }
        const n = val.pairs.length;
        log(
          run.hooks,
          'info',
          `validation: dpo loss ${(loss / n).toFixed(4)}, accuracy ${(acc / n).toFixed(3)}, ` +
            `margin ${(margin / n).toFixed(4)} (${n} pairs)`,
        );
        return loss / n;
      },
      async afterStep(step, last) {
        win.steps++;
        lastStep = step;
        if (step % rl.logging_steps === 0 || last) flush(step);
      },
      async close() {
        flush(lastStep); // a run stopped early: the steps since the last log line
      },
    };
  },
};
