// The decoder training algorithms by name: what a step of the shared loop computes (src/training/
// decoder-trainer.ts runs them; the training-jobs service picks one by the job's training_algorithm).
import { TrainingConfigError } from '../common.ts';
import { dpo } from './dpo.ts';
import { grpo } from './grpo.ts';
import { sft } from './sft.ts';
import type { DecoderAlgorithm } from './types.ts';

export const DECODER_ALGORITHMS: Readonly<Record<string, DecoderAlgorithm>> = { sft, dpo, grpo };

export function decoderAlgorithm(name: string): DecoderAlgorithm {
  const a = DECODER_ALGORITHMS[name];
  if (!a)
    throw new TrainingConfigError(`training_algorithm must be one of ${Object.keys(DECODER_ALGORITHMS).join(', ')}`);
  return a;
}
