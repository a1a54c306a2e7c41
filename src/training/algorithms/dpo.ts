// Direct Preference Optimization (Rafailov et al. 2023) on the native decoder graph, as TRL's DPOTrainer
// computes it. Rows {prompt, chosen, rejected}; per pair, the summed log-probabilities of the chosen and
// rejected completion tokens under the policy (base + LoRA, with gradient) and the reference (the same
// graph with the adapter off, no gradient, computed once per pair and kept). With
// h = (π_c − ref_c) − (π_r − ref_r):
//   sigmoid: −log σ(β·h)      ipo: (h − 1/(2β))² on length-averaged log-probs      hinge: max(0, 1 − β·h)
// chosen / rejected rewards β·(π − ref), margin = their difference, accuracy = P(chosen reward > rejected).
// The loss is a mean over the pairs of a batch; its gradient w.r.t. each completion token's log-prob is
// dL/dπ_seq (÷ length for ipo), fed to the graph's backward.
import type { DataRecord, DpoRecord } from '../data/formats.ts';
import { log, TrainingConfigError } from '../common.ts';
import type { DpoLossType } from './rl-config.ts';
import { completionIds, packScored, promptIds, type ScoredSequence } from './prompt.ts';
import type { AlgorithmRun, DecoderAlgorithm, DecoderRun } from './types.ts';

export interface DpoPairLogps {
  /** policy log-probs (summed, or averaged for ipo) of the chosen and rejected completions */
  policyChosen: number;
  policyRejected: number;
  refChosen: number;
  refRejected: number;
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
  const h = p.policyChosen - p.refChosen - (p.policyRejected - p.refRejected);
  let loss: number;
  let dh: number;
  if (type === 'sigmoid') {
    loss = softplus(-beta * h);
    dh = -beta * sigmoid(-beta * h);
  } else if (type === 'hinge') {
    loss = Math.max(0, 1 - beta * h);
    dh = 1 - beta * h > 0 ? -beta : 0;
  } else {
    const d = h - 1 / (2 * beta);
    loss = d * d;
    dh = 2 * d;
  }
  return {
    loss, dChosen: dh, dRejected: -dh,
    chosenReward: beta * (p.policyChosen - p.refChosen), rejectedReward: beta * (p.policyRejected - p.refRejected),
  };
}

interface Pair {
  chosen: ScoredSequence;
  rejected: ScoredSequence;
  /** reference log-probs of chosen / rejected (filled on first use) */
  ref?: [number, number];
}

/** Per-sequence log-prob: Σ over its completion rows (÷ count for ipo). */
function seqLogps(logp: Float32Array, rows: number[][], average: boolean): number[] {
  return rows.map((rs) => {
    let s = 0;
    for (const r of rs) s += logp[r];
    return average ? s / Math.max(rs.length, 1) : s;
  });
}

interface Window { n: number; loss: number; chosen: number; rejected: number; acc: number; steps: number }
const emptyWindow = (): Window => ({ n: 0, loss: 0, chosen: 0, rejected: 0, acc: 0, steps: 0 });

function toPairs(run: DecoderRun, recs: DataRecord[]): { pairs: Pair[]; skipped: number } {
  const pairs: Pair[] = [];
  let skipped = 0;
  for (const r of recs) {
    if (r.kind !== 'dpo') continue;
    const x = r as DpoRecord;
    const prompt = promptIds(run.tok, x.prompt);
    const room = run.maxLen - prompt.length;
    if (room < 1) { skipped++; continue; } // the prompt alone fills the context
    const cut = (ids: number[]) => ids.slice(0, room);
    pairs.push({ chosen: { prompt, completion: cut(completionIds(run.tok, x.chosen)) }, rejected: { prompt, completion: cut(completionIds(run.tok, x.rejected)) } });
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
    const average = type === 'ipo';
    const train = toPairs(run, trainRecs);
    const val = toPairs(run, valRecs);
    if (!train.pairs.length) throw new TrainingConfigError(`no usable dpo row: ${train.skipped} prompt(s) longer than the ${run.maxLen}-token context, none left to train on`);
    const g = run.graph;
    const refOf = async (pairs: Pair[], packed: ReturnType<typeof packScored>) => {
      if (pairs.every((p) => p.ref)) return;
      const { logp } = await g.forward(packed.batch, { lora: false, keep: false });
      const s = seqLogps(logp, packed.rows, average);
      pairs.forEach((p, i) => (p.ref = [s[2 * i], s[2 * i + 1]]));
    };
    const pack = (pairs: Pair[]) => packScored(pairs.flatMap((p) => [p.chosen, p.rejected]));
    let win = emptyWindow();
    const score = (pairs: Pair[], pol: number[]) =>
      pairs.map((p, i) => dpoPairLoss(type, beta, { policyChosen: pol[2 * i], policyRejected: pol[2 * i + 1], refChosen: p.ref![0], refRejected: p.ref![1] }));
    return {
      items: train.pairs,
      describe: `${train.pairs.length} training / ${val.pairs.length} validation preference pairs${train.skipped + val.skipped ? `; ${train.skipped + val.skipped} skipped (prompt longer than the ${run.maxLen}-token context)` : ''}; DPO ${type}, beta ${beta}`,
      async microStep(pairs, o) {
        const packed = pack(pairs);
        await refOf(pairs, packed);
        const { logp } = await g.forward(packed.batch, { seed: o.seed });
        const res = score(pairs, seqLogps(logp, packed.rows, average));
        const B = pairs.length;
        const dlogp = new Float32Array(logp.length);
        res.forEach((r, i) => {
          for (const [k, d] of [[2 * i, r.dChosen], [2 * i + 1, r.dRejected]] as const) {
            const rows = packed.rows[k];
            const w = (o.gradScale * d) / B / (average ? Math.max(rows.length, 1) : 1);
            for (const row of rows) dlogp[row] = w;
          }
        });
        await g.backward(dlogp);
        for (const r of res) {
          win.n++;
          win.loss += r.loss;
          win.chosen += r.chosenReward;
          win.rejected += r.rejectedReward;
          win.acc += r.chosenReward > r.rejectedReward ? 1 : 0;
        }
        return { loss: res.reduce((s, r) => s + r.loss, 0), weight: B, tokens: packed.batch.tokens.length };
      },
      async evaluate() {
        if (!val.pairs.length) return null;
        let loss = 0, acc = 0, margin = 0;
        for (let i = 0; i < val.pairs.length; i += run.batchSize) {
          const pairs = val.pairs.slice(i, i + run.batchSize);
          const packed = pack(pairs);
          await refOf(pairs, packed);
          const { logp } = await g.forward(packed.batch, { keep: false });
          for (const r of score(pairs, seqLogps(logp, packed.rows, average))) {
            loss += r.loss;
            acc += r.chosenReward > r.rejectedReward ? 1 : 0;
            margin += r.chosenReward - r.rejectedReward;
          }
        }
        const n = val.pairs.length;
        log(run.hooks, 'info', `validation: dpo loss ${(loss / n).toFixed(4)}, accuracy ${(acc / n).toFixed(3)}, margin ${(margin / n).toFixed(4)} (${n} pairs)`);
        return loss / n;
      },
      async afterStep(step) {
        win.steps++;
        if (step % rl.logging_steps !== 0 || !win.n) return;
        const n = win.n;
        log(run.hooks, 'info', `step ${step}: loss ${(win.loss / n).toFixed(4)}, rewards/chosen ${(win.chosen / n).toFixed(4)}, rewards/rejected ${(win.rejected / n).toFixed(4)}, rewards/margin ${((win.chosen - win.rejected) / n).toFixed(4)}, rewards/accuracy ${(win.acc / n).toFixed(3)}`);
        win = emptyWindow();
      },
    };
  },
};
