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

export class LabelIsolationConfigError extends Error {
  override name = 'LabelIsolationConfigError';
}

/** Reads `label_isolation` of a GLiNER2 config.json (undefined / null / false → off). */
export function parseLabelIsolation(raw: unknown, where = 'config.json'): boolean {
  if (raw === undefined || raw === null) return false;
  if (typeof raw !== 'boolean') throw new LabelIsolationConfigError(`${where}: label_isolation must be a boolean`);
  return raw;
}
