// The adaptive policy of a project (PATCH /projects/:id `{adaptive: {...}}`): its JSON schema (the
// router answers 422 naming the path for a value out of range), defaults and the merge of a patch.
import type { AdaptivePolicy } from '../../store/index.ts';

export const DEFAULT_POLICY: AdaptivePolicy = {
  enabled: false,
  min_new_corrections: 10,
  schedule_minutes: null,
  eval_dataset: null,
  min_gain: 0.01,
  replay_fraction: 0.5,
  holdout_fraction: 0.25,
  nr_epochs: null,
  learning_rate: null,
};

/** ajv schema of the `adaptive` member (every key optional: a patch) */
export const adaptivePolicySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean' },
    min_new_corrections: { type: 'integer', minimum: 1, maximum: 100_000 },
    schedule_minutes: { type: ['integer', 'null'], minimum: 1, maximum: 525_600 },
    eval_dataset: { type: ['string', 'null'], minLength: 1, maxLength: 128 },
    min_gain: { type: 'number', minimum: -1, maximum: 1 },
    replay_fraction: { type: 'number', minimum: 0, maximum: 1 },
    holdout_fraction: { type: 'number', minimum: 0.05, maximum: 0.9 },
    nr_epochs: { type: ['integer', 'null'], minimum: 1, maximum: 1000 },
    learning_rate: { type: ['number', 'null'], exclusiveMinimum: 0, maximum: 1 },
  },
};

export const policyOf = (stored: AdaptivePolicy | null | undefined): AdaptivePolicy => ({
  ...DEFAULT_POLICY,
  ...(stored ?? {}),
});
