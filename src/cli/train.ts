// `loom train --dataset <jsonl | name in ../shared/data> --base-model <dir> --out <dir> [options]`
// Encoder (GLiNER2) or decoder (LoRA SFT) training with a progress bar; the same trainers the
// service's training jobs run. `--eval <jsonl>` scores the best model after training (strict span F1 for
// NER, accuracy for classification). `--max-minutes` is the encoder's time budget (its LR schedule's
// length and a stop, src/training/common.ts); for the decoder it is a hard stop.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { trainDecoder, trainEncoder, evaluateNer, evaluateClassification } from '../training/index.ts';
import { loadRecords } from '../training/common.ts';
import type { NegativeSpanHard } from '../training/encoder/recipe.ts';

const HELP = `usage: loom train --dataset <file.jsonl|name> --base-model <dir> --out <dir>
  [--type full|lora] [--epochs N] [--lr X] [--encoder-lr X] [--batch-size N] [--grad-accum N] [--seed N]
  [--val-pct P] [--patience N] [--scheduler linear|cosine|constant] [--max-steps N] [--max-minutes M]
  [--lora-r N] [--lora-alpha X] [--lora-dropout X] [--targets a,b] [--eval file.jsonl] [--threads N]
  encoder: [--hidden-dropout P] [--attention-dropout P] [--word-dropout P] [--rare-word-dropout P] [--negative-labels K]
  [--full-label-ratio R] [--selection task|loss] [--metric-samples N] [--warmup-ratio R] [--max-words N]
  [--eval-steps N] [--classifier-prior-init] (a fresh classifier's bias starts at the label prior, as jobs on
  fresh bases do) [--classification-loss bce|softmax] (single-label tasks; jobs on fresh bases use softmax)
  [--ema-decay D] (evaluate and save a moving average of the weights)
  [--mention-replacement P] (NER: swap each mention for another of its label from the data at this rate)
  [--mention-dropout P] (NER: a mention's words replaced by [UNK] at this rate, their shape kept)
  [--hard-negatives R] (classification: this share of the sampled negatives drawn by the labels confused with)
  [--negative-span-keep P|balanced] (NER: the share of negative spans in the span loss, 0.5; balanced: by the data)
  [--negative-span-hard none|label|boundary|auto] (NER: negatives always in the span loss: a mention's span under
  another label; boundary: also spans starting or ending where a mention does; auto: label at a keep of 0.5)
  [--piece-dropout P] (NER: a text word segmented again at each step, each longer piece passed over at this rate)
  [--precision auto|fp32|bf16] (matrix products in bf16 where the CPU has AVX512_BF16 and they are faster)`;

export async function main(argv: string[]): Promise<number> {
  const names = ['dataset', 'base-model', 'out', 'type', 'epochs', 'lr', 'encoder-lr', 'batch-size', 'grad-accum',
    'seed', 'val-pct', 'patience', 'scheduler', 'max-steps', 'max-minutes', 'lora-r', 'lora-alpha', 'lora-dropout',
    'targets', 'eval', 'threads', 'eval-steps', 'max-words',
    'hidden-dropout', 'attention-dropout', 'word-dropout', 'negative-labels', 'full-label-ratio', 'selection',
    'metric-samples', 'warmup-ratio', 'precision', 'classification-loss',
    'ema-decay', 'rare-word-dropout', 'mention-replacement', 'mention-dropout', 'hard-negatives',
    'negative-span-keep', 'negative-span-hard', 'piece-dropout'];
  const options: Record<string, { type: 'string' | 'boolean' }> = { help: { type: 'boolean' } };
  for (const k of names) options[k] = { type: 'string' };
  options['classifier-prior-init'] = { type: 'boolean' };
  const v = parseArgs({ args: argv, options }).values as Record<string, string | boolean | undefined>;
  if (v.help) return (console.log(HELP), 0);
  if (!v.dataset || !v['base-model'] || !v.out) return (console.error(HELP), 2);
  let ds = v.dataset as string;
  if (!existsSync(ds)) {
    const named = join(import.meta.dirname, '../../../shared/data', ds, 'train.jsonl');
    if (!existsSync(named)) return (console.error(`train: dataset ${ds} not found`), 2);
    ds = named;
  }
  const num = (k: string) => (v[k] !== undefined ? Number(v[k]) : undefined);
  const records = loadRecords(ds);
  const isDecoder = records[0]?.kind === 'chat';
  const ctl = new AbortController();
  process.once('SIGINT', () => ctl.abort());
  const maxMin = num('max-minutes');
  const timer = maxMin && isDecoder ? setTimeout(() => ctl.abort(), maxMin * 60_000) : undefined;
  const bar = new cliProgress.SingleBar({ format: 'train |{bar}| {percentage}% | step {value}/{total} | epoch {epoch} | loss {loss} | {tps} tok/s', hideCursor: true }, cliProgress.Presets.shades_classic);
  let started = false;
  const hooks = {
    signal: ctl.signal,
    onProgress: (e: { step: number; totalSteps: number; epoch: number; loss: number; tokens_per_s: number }) => {
      if (!started) (bar.start(e.totalSteps, 0, { epoch: 1, loss: '-', tps: '-' }), (started = true));
      bar.update(e.step, { epoch: e.epoch, loss: e.loss.toFixed(4), tps: e.tokens_per_s.toFixed(0) });
    },
    onLog: (e: { level: string; message: string }) => (started ? process.stderr.write(`\n${e.message}\n`) : console.log(e.message)),
    onCheckpoint: (e: { id: string; val_loss: number | null; is_best: boolean }) => started || console.log(`checkpoint ${e.id}${e.is_best ? ' (best)' : ''}`),
  };
  const common = {
    base_model: v['base-model'] as string, output_dir: v.out as string, train_data: records, training_type: v.type as 'lora' | 'full' | undefined,
    nr_epochs: num('epochs'), learning_rate: num('lr'), batch_size: num('batch-size'), gradient_accumulation_steps: num('grad-accum'), seed: num('seed'),
    validation_data_percentage: num('val-pct'), early_stopping_patience: num('patience'), scheduler: v.scheduler as 'linear' | undefined, max_steps: num('max-steps'),
    lora_r: num('lora-r'), lora_alpha: num('lora-alpha'), lora_dropout: num('lora-dropout'), lora_target_modules: v.targets ? String(v.targets).split(',') : undefined,
    threads: num('threads'), eval_steps: num('eval-steps'), warmup_ratio: num('warmup-ratio'),
    precision: v.precision as 'auto' | 'fp32' | 'bf16' | undefined,
  };
  const encoderOnly = {
    encoder_learning_rate: num('encoder-lr'), max_words: num('max-words'), max_minutes: maxMin,
    hidden_dropout: num('hidden-dropout'), attention_dropout: num('attention-dropout'),
    word_dropout: num('word-dropout'), rare_word_dropout: num('rare-word-dropout'), piece_dropout: num('piece-dropout'),
    mention_replacement: num('mention-replacement'), mention_dropout: num('mention-dropout'),
    hard_negatives: num('hard-negatives'),
    negative_span_keep: v['negative-span-keep'] === 'balanced' ? 'balanced' as const : num('negative-span-keep'),
    negative_span_hard: v['negative-span-hard'] as NegativeSpanHard | undefined,
    negative_labels: num('negative-labels'),
    full_label_ratio: num('full-label-ratio'),
    selection_metric: v.selection as 'task' | 'loss' | undefined, metric_samples: num('metric-samples'),
    classifier_prior_init: v['classifier-prior-init'] === true ? true : undefined,
    classification_loss: v['classification-loss'] as 'bce' | 'softmax' | undefined,
    ema_decay: num('ema-decay'),
  };
  const res = isDecoder ? await trainDecoder(common, hooks) : await trainEncoder({ ...common, ...encoderOnly }, hooks);
  if (timer) clearTimeout(timer);
  if (started) bar.stop();
  const metric = res.best_val_metric != null ? `, best val_metric ${res.best_val_metric.toFixed(4)}` : '';
  console.log(`${res.stopped}: ${res.steps} steps, train_loss ${res.train_loss.toFixed(4)}, `
    + `val_loss ${res.val_loss?.toFixed(4) ?? '-'}${metric}, ${res.tokens_per_s.toFixed(0)} tokens/s, `
    + `${res.duration_s.toFixed(0)} s`);
  console.log(`final: ${res.final_checkpoint}${res.best_checkpoint ? `\nbest: ${res.best_checkpoint}` : ''}`);
  if (v.eval && !isDecoder) {
    for (const f of String(v.eval).split(',')) {
      const recs = loadRecords(f);
      if (recs.some((r) => r.kind === 'classification')) {
        const c = await evaluateClassification(res.best_checkpoint ?? res.final_checkpoint, recs);
        const acc = `accuracy ${c.accuracy.toFixed(4)} macro-F1 ${c.macro_f1.toFixed(4)}`;
        console.log(`eval ${f}: ${acc} (${c.sample_count} texts)`);
        continue;
      }
      const s = await evaluateNer(res.best_checkpoint ?? res.final_checkpoint, recs);
      console.log(`eval ${f}: F1 ${s.f1.toFixed(4)} P ${s.precision.toFixed(4)} R ${s.recall.toFixed(4)} (${s.sample_count} texts)`);
      for (const [l, p] of Object.entries(s.per_label)) console.log(`  ${l}: F1 ${p.f1.toFixed(4)} P ${p.precision.toFixed(4)} R ${p.recall.toFixed(4)} (${p.support})`);
    }
  }
  return 0;
}
