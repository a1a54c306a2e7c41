// What a training job trains with where its request says nothing, by base: decoders, fresh encoders (the fresh recipe
// of their preset, src/training/encoder/recipe.ts), pretrained encoders and checkpoints of fresh ones.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseLabelIsolation } from '../../models/encoder/label-isolation.ts';
import { ENCODER_RECIPE, FRESH_CLASSIFICATION_LOSS, freshRecipe, fullLabelRatio } from '../../training/encoder/recipe.ts';

/**
 * encoders: `learning_rate` drives the task heads, `encoder_learning_rate` the backbone (spec §5).
 * `fresh`: the preset of a fresh-initialized base (FRESH_ENCODERS), else null.
 */
export function jobDefaults(
  kind: 'encoder' | 'decoder', fresh: string | null, type: 'lora' | 'full', dir: string | null, clsOnly: boolean,
) {
  if (kind === 'decoder') return { nr_epochs: 1, learning_rate: 2e-4, batch_size: 4 };
  if (fresh) return { nr_epochs: 10, ...freshRecipe(fresh, clsOnly) };
  const encoderLr = type === 'lora' ? 2e-4 : 1e-5;
  // a checkpoint of a fresh base keeps its label isolation, so it keeps training on sampled labels, with the loss
  // it was trained with (the fresh recipe's)
  const isolated = isolatedBase(dir);
  const recipe = {
    ...ENCODER_RECIPE, full_label_ratio: fullLabelRatio(isolated),
    ...(isolated ? { classification_loss: FRESH_CLASSIFICATION_LOSS } : {}),
  };
  return { nr_epochs: 3, learning_rate: 5e-4, encoder_learning_rate: encoderLr, batch_size: 8, ...recipe };
}

/** Whether the encoder in `dir` isolates its labels (config.json `label_isolation`); unreadable: no. */
export function isolatedBase(dir: string | null): boolean {
  if (!dir) return false;
  try {
    return parseLabelIsolation(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).label_isolation);
  } catch {
    return false;
  }
}
