// The reward types of GRPO's `rl_config.reward_type`, in a leaf of their own (no imports) so that
// rl-config.ts, and through it the dashboard's training form, can name them without the reward code.
export type RewardType = 'exact_match' | 'contains_substring' | 'numeric_match' | 'choice_match' | 'regex_match'
  | 'json_match' | 'json_loose_match' | 'rougeL_match' | 'llm_as_judge';

export const REWARD_TYPES: readonly RewardType[] = [
  'exact_match', 'contains_substring', 'numeric_match', 'choice_match', 'regex_match',
  'json_match', 'json_loose_match', 'rougeL_match', 'llm_as_judge',
];
