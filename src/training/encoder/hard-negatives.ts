// Hard negative labels for many-label classification (issue 17). A single-label example trains on its true label and
// k sampled negatives (sampleNegativeLabels); drawn uniformly, the few labels it is confused with (Banking77's "card
// arrival" against "card delivery estimate") come up in about k / (C - 1) of its steps, while the served prompt ranks
// all C. LabelConfusion keeps, per (true label, other label), a running mean of the logit margin z_other - z_true seen
// in the training steps' own forward passes, and draws part of the negatives by it: label l with weight
// exp(margin(t, l)), without replacement (Gumbel top-k), the rest uniformly, as in the sampled softmax of retrieval
// models with mined negatives. Margins start at 0, so the first draws are uniform.
import { drawFirst, type Uniform } from './examples.ts';

export class LabelConfusion {
  private readonly index = new Map<string, number>();
  /** margin[t * C + l]: running mean of z_l - z_t over the steps where l was asked for an example of label t */
  private readonly margin: Float32Array;

  constructor(
    readonly labels: string[],
    /** how far one observation moves the running mean */
    readonly rate = 0.1,
  ) {
    labels.forEach((l, i) => this.index.set(l, i));
    this.margin = new Float32Array(labels.length * labels.length);
  }

  /** One forward pass's logits of a single-label example: `names` are the prompt's labels, `truth` the true one. */
  observe(truth: string, names: string[], logits: ArrayLike<number>): void {
    const t = this.index.get(truth);
    const zt = names.indexOf(truth);
    if (t === undefined || zt < 0) return;
    const C = this.labels.length;
    names.forEach((name, m) => {
      const l = this.index.get(name);
      if (l === undefined || l === t) return;
      const at = t * C + l;
      this.margin[at] += this.rate * (logits[m] - logits[zt] - this.margin[at]);
    });
  }

  /** The running margin of label `other` for examples of `truth` (0 until observed). */
  marginOf(truth: string, other: string): number {
    const t = this.index.get(truth);
    const l = this.index.get(other);
    return t === undefined || l === undefined ? 0 : this.margin[t * this.labels.length + l];
  }

  /**
   * k negatives for an example of `truth` among `negatives` (its task's other labels): round(k * hard) of them drawn
   * with weight exp(margin), without replacement, the rest uniformly from those left (one draw per candidate, then one
   * per uniform pick).
   */
  pick(truth: string, negatives: string[], k: number, hard: number, rng: Uniform): string[] {
    const h = Math.min(k, Math.round(k * hard));
    // Gumbel top-h: key = margin + Gumbel noise; the h largest keys are a draw without replacement by exp(margin)
    const gumbel = () => -Math.log(-Math.log(rng.uniform() || 1e-12));
    const keyed = negatives.map((l) => ({ l, key: this.marginOf(truth, l) + gumbel() }));
    keyed.sort((a, b) => b.key - a.key);
    const chosen = keyed.slice(0, h).map((x) => x.l);
    const rest = keyed.slice(h).map((x) => x.l);
    drawFirst(rest, k - h, rng);
    return [...chosen, ...rest.slice(0, k - h)];
  }
}
