// `rl_config` of DPO and GRPO training jobs: every key, its default and its range, validated in one
// place for the service (422 with the key's path at job creation) and the trainer (TrainingConfigError).
// Pure TypeScript (no native code, no Node import): the service imports it on the main thread, the
// dashboard's training form in the browser (its fields and defaults).
import { REWARD_TYPES, type RewardType } from '../../rl/rewards/types.ts';

export type RlAlgorithm = 'dpo' | 'grpo';
export type DpoLossType = 'sigmoid' | 'ipo' | 'hinge';
export const DPO_LOSS_TYPES: readonly DpoLossType[] = ['sigmoid', 'ipo', 'hinge'];

export interface RlConfig {
  /** optimizer steps (0: the job's nr_epochs decide) */
  max_steps: number;
  /** a metrics log line every n optimizer steps */
  logging_steps: number;
  // DPO
  dpo_beta: number;
  loss_type: DpoLossType;
  // GRPO
  reward_type: RewardType | null;
  kl_beta: number;
  group_size: number;
  sampling_temperature: number;
  max_completion_length: number;
  /** PPO-style ratio clip ε (TRL's epsilon) */
  clip_epsilon: number;
  // llm_as_judge
  llm_judge_model: string | null;
  llm_judge_rubric: string | null;
  llm_judge_score_scale: number;
  llm_judge_timeout_s: number;
  llm_judge_max_concurrent: number;
  llm_judge_max_retries: number;
  llm_judge_retry_backoff_s: number;
}

type Rule =
  | { kind: 'int'; min: number; max: number; def: number; algos?: RlAlgorithm[] }
  | { kind: 'num'; min: number; max: number; def: number; exclusiveMin?: boolean; algos?: RlAlgorithm[] }
  | { kind: 'enum'; values: readonly string[]; def: string | null; algos?: RlAlgorithm[] }
  | { kind: 'str'; maxLength: number; def: string | null; algos?: RlAlgorithm[] };

/** Every key: type, range, default, and the algorithms it applies to (all when absent). */
export const RL_CONFIG_RULES: Record<keyof RlConfig, Rule> = {
  max_steps: { kind: 'int', min: 0, max: 1_000_000, def: 0 },
  logging_steps: { kind: 'int', min: 1, max: 1_000_000, def: 25 },
  dpo_beta: { kind: 'num', min: 0, max: 100, def: 0.1, exclusiveMin: true, algos: ['dpo'] },
  loss_type: { kind: 'enum', values: DPO_LOSS_TYPES, def: 'sigmoid', algos: ['dpo'] },
  reward_type: { kind: 'enum', values: REWARD_TYPES, def: null, algos: ['grpo'] },
  kl_beta: { kind: 'num', min: 0, max: 10, def: 0.04, algos: ['grpo'] },
  group_size: { kind: 'int', min: 2, max: 64, def: 8, algos: ['grpo'] },
  sampling_temperature: { kind: 'num', min: 0, max: 2, def: 1.0, exclusiveMin: true, algos: ['grpo'] },
  max_completion_length: { kind: 'int', min: 1, max: 4096, def: 128, algos: ['grpo'] },
  clip_epsilon: { kind: 'num', min: 0, max: 1, def: 0.2, exclusiveMin: true, algos: ['grpo'] },
  llm_judge_model: { kind: 'str', maxLength: 200, def: null, algos: ['grpo'] },
  llm_judge_rubric: { kind: 'str', maxLength: 20_000, def: null, algos: ['grpo'] },
  llm_judge_score_scale: { kind: 'num', min: 1, max: 1000, def: 10, algos: ['grpo'] },
  llm_judge_timeout_s: { kind: 'num', min: 0, max: 600, def: 60, exclusiveMin: true, algos: ['grpo'] },
  llm_judge_max_concurrent: { kind: 'int', min: 1, max: 64, def: 4, algos: ['grpo'] },
  llm_judge_max_retries: { kind: 'int', min: 0, max: 10, def: 2, algos: ['grpo'] },
  llm_judge_retry_backoff_s: { kind: 'num', min: 0, max: 60, def: 1, algos: ['grpo'] },
};

export interface RlConfigProblem {
  /** JSON pointer under the request body, e.g. /rl_config/group_size */
  path: string;
  message: string;
  keyword: string;
}

/**
 * Validates a request's rl_config for `algo` and fills the defaults (keys of the other algorithm are
 * left out, so the result validates again as is). Problems are returned (first one
 * first), never thrown: the service turns them into a 422, the trainer into a TrainingConfigError.
 */
export function parseRlConfig(algo: RlAlgorithm, raw: unknown): { config: RlConfig; problems: RlConfigProblem[] } {
  const problems: RlConfigProblem[] = [];
  const out: Record<string, unknown> = {};
  const bad = (key: string, message: string, keyword: string) =>
    problems.push({ path: `/rl_config${key ? `/${key}` : ''}`, message, keyword });
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    bad('', 'rl_config must be an object', 'type');
    raw = {};
  }
  const obj = raw as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    const rule = RL_CONFIG_RULES[key as keyof RlConfig];
    if (!rule)
      bad(
        key,
        `unknown rl_config key ${key} (known: ${Object.keys(RL_CONFIG_RULES).join(', ')})`,
        'additionalProperties',
      );
    else if (rule.algos && !rule.algos.includes(algo))
      bad(key, `rl_config.${key} applies to ${rule.algos.join('/')} only, not ${algo}`, 'not_for_algorithm');
  }
  for (const [key, rule] of Object.entries(RL_CONFIG_RULES)) {
    const v = obj[key];
    if (rule.algos && !rule.algos.includes(algo)) continue; // the other algorithm's keys stay absent
    if (v === undefined || (v === null && rule.def === null)) {
      out[key] = rule.def;
      continue;
    }
    if (rule.kind === 'int' || rule.kind === 'num') {
      const isNum = typeof v === 'number' && Number.isFinite(v);
      if (!isNum || (rule.kind === 'int' && !Number.isInteger(v))) {
        bad(key, `rl_config.${key} must be ${rule.kind === 'int' ? 'an integer' : 'a number'}`, 'type');
        continue;
      }
      const low = 'exclusiveMin' in rule && rule.exclusiveMin ? v <= rule.min : v < rule.min;
      if (low || v > rule.max) {
        bad(
          key,
          `rl_config.${key} must be ${'exclusiveMin' in rule && rule.exclusiveMin ? '>' : '>='} ${rule.min} ` +
            `and <= ${rule.max}`,
          'range',
        );
        continue;
      }
    } else if (rule.kind === 'enum') {
      if (typeof v !== 'string' || !rule.values.includes(v)) {
        bad(key, `rl_config.${key} must be one of ${rule.values.join(', ')}`, 'enum');
        continue;
      }
    } else if (typeof v !== 'string' || !v.trim() || v.length > rule.maxLength) {
      bad(key, `rl_config.${key} must be a non-empty string of at most ${rule.maxLength} characters`, 'type');
      continue;
    }
    out[key] = v;
  }
  const config = out as unknown as RlConfig;
  if (algo === 'grpo' && obj.reward_type === undefined)
    bad('reward_type', 'grpo needs rl_config.reward_type', 'required');
  if (algo === 'grpo' && config.reward_type === 'llm_as_judge') {
    if (!config.llm_judge_model)
      bad('llm_judge_model', 'reward_type llm_as_judge needs rl_config.llm_judge_model (a served decoder)', 'required');
    if (!config.llm_judge_rubric)
      bad('llm_judge_rubric', 'reward_type llm_as_judge needs rl_config.llm_judge_rubric', 'required');
  }
  return { config, problems };
}
