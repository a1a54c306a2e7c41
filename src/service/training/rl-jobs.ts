// What a DPO / GRPO training job adds to job creation (src/service/training-jobs.ts): the rl_config
// (src/training/algorithms/rl-config.ts: every key, default and range; 422 with the key's path), the base
// (a decoder the runtime serves; encoders and fresh encoders are refused with the reason), the dataset's
// record shape (422 naming the first row of another shape) and, for llm_as_judge, the judge model
// (src/service/judge/model.ts, the check PUT /judge makes: 404 when unknown, 422 when it is an encoder).
// Training itself runs in the worker.
import { readFileSync } from 'node:fs';
import { detectKind, type RecordKind } from '../../training/data/formats.ts';
import { parseRlConfig, type RlAlgorithm, type RlConfig } from '../../training/algorithms/rl-config.ts';
import type { JudgeRewardOptions, RewardItem } from '../../rl/rewards/index.ts';
import type { Catalog } from '../catalog.ts';
import { ValidationError } from '../errors.ts';
import { checkJudgeModel } from '../judge/model.ts';
import type { Store } from '../../store/index.ts';

export type TrainingAlgorithm = 'sft' | RlAlgorithm;

/** The judge the service gives GRPO's llm_as_judge rewards (src/service/judge at merge). */
export type RewardJudge = (
  items: RewardItem[],
  opts: JudgeRewardOptions,
) => Promise<{ scores: number[]; errors: (string | null)[] }>;

/** Dataset record kind each algorithm trains a decoder on. */
export const DECODER_RECORD_KIND: Record<TrainingAlgorithm, RecordKind> = { sft: 'chat', dpo: 'dpo', grpo: 'grpo' };
const SHAPES: Record<TrainingAlgorithm, string> = {
  sft: '{messages}',
  dpo: '{prompt, chosen, rejected}',
  grpo: '{prompt, answer}',
};

/** The validated rl_config with defaults; 422 listing every problem (the first one's path is the param). */
export function rlConfigOrThrow(algo: RlAlgorithm, raw: unknown): RlConfig {
  if (raw === undefined)
    throw new ValidationError(`${algo} needs rl_config`, [
      { path: '/rl_config', message: `${algo} needs rl_config`, keyword: 'required' },
    ]);
  const { config, problems } = parseRlConfig(algo, raw);
  if (problems.length) throw new ValidationError(problems[0].message, problems);
  return config;
}

/** 422 unless the base can be trained with DPO / GRPO. */
export function checkRlBase(
  algo: RlAlgorithm,
  base: { task_type: string; source: string; catalog_id: string },
  requested: string,
): void {
  if (base.task_type === 'decoder') return;
  const what = base.source === 'fresh' ? `a fresh ${base.catalog_id} encoder` : `an encoder (${base.catalog_id})`;
  const message =
    `${algo} is not supported for ${requested}: it is ${what}, which is not verified for reinforcement learning; ` +
    'dpo and grpo train decoder models (GET /base-models lists supports_rl)';
  throw new ValidationError(message, [{ path: '/training_algorithm', message, keyword: 'rl_not_supported' }]);
}

/** llm_as_judge: the judge must be a model that can judge (src/service/judge/model.ts), and the server must have a judge. */
export async function checkJudge(
  rl: RlConfig,
  d: { store: Store; catalog: Catalog },
  teamId: string,
  judgeAvailable: boolean,
): Promise<void> {
  if (rl.reward_type !== 'llm_as_judge') return;
  await checkJudgeModel(d, teamId, rl.llm_judge_model!, '/rl_config/llm_judge_model');
  if (!judgeAvailable) {
    const message = 'llm_as_judge rewards are not available on this server (no judge service)';
    throw new ValidationError(message, [{ path: '/rl_config/llm_judge_model', message, keyword: 'judge_unavailable' }]);
  }
}

/**
 * 422 when a dataset holds rows of another shape than the algorithm trains on, naming the first such
 * row (1-based line of the dataset's canonical JSONL).
 */
export function checkDatasetShape(
  algo: TrainingAlgorithm,
  name: string,
  kinds: string[],
  dataFile: () => string,
  path: string,
): void {
  const want = DECODER_RECORD_KIND[algo];
  if (kinds.length === 1 && kinds[0] === want) return;
  let line = 0;
  let found: string | null = null;
  for (const l of readFileSync(dataFile(), 'utf8').split('\n')) {
    line++;
    if (!l.trim()) continue;
    const kind = detectKind(JSON.parse(l) as Record<string, unknown>);
    if (kind !== want) {
      found = kind ?? 'unrecognized';
      break;
    }
  }
  if (found === null && kinds.includes(want)) return;
  const what = found ? `row ${line} is a ${found} record` : `it holds ${kinds.join('/')} records`;
  const message = `dataset ${name}: ${algo} trains on ${SHAPES[algo]} rows; ${what}`;
  throw new ValidationError(message, [{ path, message, keyword: 'dataset_type' }]);
}
