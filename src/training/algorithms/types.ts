// What the decoder trainer (src/training/decoder-trainer.ts) hands an algorithm, and what an algorithm
// hands back to the shared loop (src/training/common.ts runTrainingLoop). Types only.
import type { DecoderConfig } from '../../formats/hf-config.ts';
import type { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { RewardContext } from '../../rl/rewards/index.ts';
import type { DataRecord, RecordKind } from '../data/formats.ts';
import type { TrainHooks } from '../common.ts';
import type { DecoderTrainGraph } from '../native.ts';
import type { RlConfig } from './rl-config.ts';

export type AlgorithmName = 'sft' | 'dpo' | 'grpo';

/** One decoder run's shared state: the graph (policy with LoRA; reference = LoRA off), tokenizer, options. */
export interface DecoderRun {
  /** base model directory */
  baseDir: string;
  dc: DecoderConfig;
  tok: Tokenizer;
  graph: DecoderTrainGraph;
  hooks: TrainHooks;
  /** tokens per sequence */
  maxLen: number;
  batchSize: number;
  seed: number;
  /** DPO / GRPO: the validated rl_config (null for SFT) */
  rl: RlConfig | null;
  /** GRPO llm_as_judge: the service's judge (src/rl/rewards RewardContext) */
  rewardContext?: RewardContext;
  /** writes the current adapter as PEFT files into `dir` */
  saveAdapter(dir: string): void;
}

export interface MicroResult {
  /** added to the loop's logging window with `weight` */
  loss: number;
  weight: number;
  tokens: number;
  /** the run was stopped during this micro-step: no gradient was added, no optimizer step follows */
  aborted?: boolean;
}

/** What an algorithm plugs into the shared loop. */
export interface AlgorithmRun<T> {
  items: T[];
  /** a log line describing the data (counts, skipped rows) */
  describe: string;
  microStep(items: T[], o: { gradScale: number; seed: number }): Promise<MicroResult>;
  /** validation loss (null: none) */
  evaluate(): Promise<number | null>;
  /** after each optimizer step (metrics logging every logging_steps and at the last planned step, policy
   *  refresh for generation); `last`: the run's final planned step (total or max_steps) */
  afterStep?(step: number, last: boolean): Promise<void>;
  /** frees what the run holds (a generation engine); logs metrics of steps not logged yet (a run stopped early) */
  close?(): Promise<void>;
}

export interface DecoderAlgorithm {
  name: AlgorithmName;
  /** dataset record kinds it trains on */
  recordKinds: RecordKind[];
  prepare(run: DecoderRun, train: DataRecord[], val: DataRecord[]): Promise<AlgorithmRun<unknown>>;
}
