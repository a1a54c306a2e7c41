// Label isolation of fresh GLiNER2 encoders (issue 17). GLiNER2 encodes prompt and text as one sequence with full
// attention, so in a 77-label prompt a label's `[L]` marker averages over ~270 other label pieces and ~16 text pieces,
// and its state depends on which other labels are present: a model trained on sampled labels (true + k) does not
// transfer to the served full prompt, and one trained on full prompts learns slowly.
// Config (one place): `label_isolation: true` in the GLiNER2 config.json. Every token then has a group (format.ts
// `Formatted.groups`): 0 for the text and every shared prompt token (task prompts, `[P]`, parentheses, `[SEP_*]`,
// entity / structure / relation segments), g >= 1 for the `[L]` marker and words of the g-th classification label.
// A query of group 0 attends to keys of group 0 only, one of group g to keys of group 0 and g, and relative positions
// count group 0 alone, then each label as if it alone followed the text (native/models/deberta.h group_positions):
// a label's logit is the same whatever other labels the prompt holds, in any order. Absent or false: today's model.
// Label bags (below) are this file's second config flag: how a classification label enters the prompt.

export class LabelIsolationConfigError extends Error {
  override name = 'LabelIsolationConfigError';
}

/** Reads `label_isolation` of a GLiNER2 config.json (undefined / null / false → off). */
export function parseLabelIsolation(raw: unknown, where = 'config.json'): boolean {
  if (raw === undefined || raw === null) return false;
  if (typeof raw !== 'boolean') throw new LabelIsolationConfigError(`${where}: label_isolation must be a boolean`);
  return raw;
}

// Label bags (issue 17): `label_bag: true` in a fresh encoder's config.json makes each classification label one
// prompt token, its `[L]` marker, whose input embedding adds the mean of the word-table rows of the label name's
// pieces (native ops.h bag_embedding_fwd); the name itself takes no tokens. A 77-label Banking77 prompt of ~330
// label tokens becomes 77, in training and served (docs/training.md, "Label bags"). Independent of label_isolation,
// with which a label's logit stays a function of the text and its own name alone.

/** Reads `label_bag` of a GLiNER2 config.json (undefined / null / false → off). */
function parseLabelBag(raw: unknown, where = 'config.json'): boolean {
  if (raw === undefined || raw === null) return false;
  if (typeof raw !== 'boolean') throw new LabelIsolationConfigError(`${where}: label_bag must be a boolean`);
  return raw;
}

/** How a model's prompt carries classification labels: config.json `label_isolation` and `label_bag`. */
export interface LabelPrompt {
  isolation: boolean;
  bag: boolean;
}

/** Reads both label flags of a GLiNER2 config.json. */
export function parseLabelPrompt(cfg: Record<string, unknown>, where = 'config.json'): LabelPrompt {
  return { isolation: parseLabelIsolation(cfg.label_isolation, where), bag: parseLabelBag(cfg.label_bag, where) };
}

/** A formatted input's label bags: (n × cols) word-table rows, -1 = none (format.ts fills them). */
export interface LabelBags {
  bags: Int32Array;
  cols: number;
}

/** The bags of a batch of B formatted inputs padded to N tokens: (B × N × cols), cols the widest input's; undefined
 * when no input has bags. */
export function batchLabelBags(items: readonly (LabelBags | undefined)[], N: number): Int32Array | undefined {
  const cols = Math.max(0, ...items.map((b) => b?.cols ?? 0));
  if (!cols) return undefined;
  const out = new Int32Array(items.length * N * cols).fill(-1);
  items.forEach((b, i) => {
    if (!b) return;
    const n = b.bags.length / b.cols;
    for (let t = 0; t < n; t++)
      for (let k = 0; k < b.cols; k++) out[(i * N + t) * cols + k] = b.bags[t * b.cols + k]!;
  });
  return out;
}
