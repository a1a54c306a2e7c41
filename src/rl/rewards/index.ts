// The reward functions of reinforcement-learning jobs (GRPO's `rl_config.reward_type`): each maps a
// sampled completion and the dataset row's `answer` to a reward in [0, 1]. Eight are pure functions
// of (completion, answer), documented in their modules (text.ts, numeric.ts, json.ts, rouge.ts)
// and in the README's reward table; `llm_as_judge` asks a served decoder (the service's judge,
// src/service/judge/) through `RewardContext.judge`.
//
// An item whose reward cannot be computed (an answer that is not a pattern / number / JSON / letter,
// a judge call that failed after its retries) gets reward 0 and its error; computeRewards never
// throws for one item's data. It throws only when called wrongly (llm_as_judge without a judge).
import { containsSubstring, choiceMatch, exactMatch, regexMatch } from './text.ts';
import { numericMatch } from './numeric.ts';
import { jsonLooseMatch, jsonMatch } from './json.ts';
import { rougeLMatch } from './rouge.ts';

import type { RewardType } from './types.ts';

export { REWARD_TYPES, type RewardType } from './types.ts';

export interface RewardItem { prompt: string; completion: string; answer: string }

export interface JudgeRewardOptions {
  model: string; rubric: string; scoreScale: number; timeoutS: number;
  maxConcurrent: number; maxRetries: number; retryBackoffS: number; teamId: string;
}

/** judge: provided by the service (the LLM judge) when rewardType is llm_as_judge; scores in [0,1] */
export interface RewardContext {
  judge?: (items: RewardItem[], opts: JudgeRewardOptions) => Promise<{ scores: number[]; errors: (string | null)[] }>;
  judgeOptions?: JudgeRewardOptions;
}

export type PureReward = (completion: string, answer: string) => number;

/** the eight pure rewards, by type */
export const PURE_REWARDS: Readonly<Record<Exclude<RewardType, 'llm_as_judge'>, PureReward>> = {
  exact_match: exactMatch,
  contains_substring: containsSubstring,
  numeric_match: numericMatch,
  choice_match: choiceMatch,
  regex_match: regexMatch,
  json_match: jsonMatch,
  json_loose_match: jsonLooseMatch,
  rougeL_match: rougeLMatch,
};

const clamp01 = (x: number) => (Number.isFinite(x) ? Math.min(1, Math.max(0, x)) : 0);

/** rewards in [0,1] (one per item); a failed llm_as_judge item is reward 0 with its error */
export async function computeRewards(type: RewardType, items: RewardItem[], ctx?: RewardContext):
  Promise<{ rewards: number[]; errors: (string | null)[] }> {
  if (type === 'llm_as_judge') {
    if (!ctx?.judge || !ctx.judgeOptions) throw new Error('llm_as_judge rewards need the service judge (ctx.judge and ctx.judgeOptions)');
    if (!items.length) return { rewards: [], errors: [] };
    const out = await ctx.judge(items, ctx.judgeOptions);
    return {
      rewards: items.map((_, i) => (out.errors[i] ? 0 : clamp01(out.scores[i]))),
      errors: items.map((_, i) => out.errors[i] ?? (Number.isFinite(out.scores[i]) ? null : 'judge returned no score')),
    };
  }
  const fn = PURE_REWARDS[type];
  if (!fn) throw new Error(`unknown reward type ${JSON.stringify(type)}`);
  const rewards: number[] = [];
  const errors: (string | null)[] = [];
  for (const it of items) {
    try {
      rewards.push(clamp01(fn(it.completion, it.answer)));
      errors.push(null);
    } catch (e) {
      rewards.push(0);
      errors.push(e instanceof Error ? e.message : String(e));
    }
  }
  return { rewards, errors };
}
