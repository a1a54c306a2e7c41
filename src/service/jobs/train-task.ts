// A training run (customization worker pool): calls the training library (src/training/index.ts:
// trainEncoder / trainDecoder) with hooks that post progress, log lines and checkpoints to the
// main thread over the task's port. A `{type: 'stop'}` message on the port aborts the trainer's
// signal: it stops after the current step, saves a last checkpoint and returns.
// After training, the final model is scored on the validation split (evaluate-task.ts) so the job
// carries f1 / precision / recall.
import { readFileSync } from 'node:fs';
import type { MessagePort } from 'node:worker_threads';
import { evaluate, type EvaluateResult } from './evaluate-task.ts';
import type { JudgeRewardOptions, RewardItem } from '../../rl/rewards/index.ts';

export interface TrainTask {
  op: 'train';
  kind: 'encoder' | 'decoder';
  /** the training library's config (base_model dir, output_dir, hyper-parameters, data files) */
  config: Record<string, unknown>;
  /** fresh encoder: initialize `config.base_model` from this preset first (loom init-encoder) */
  init_encoder?: { preset: string; texts_from: string[]; seed?: number };
  /** data file + validation indices to score the final model on */
  score?: { data_file: string; indices?: number[]; threshold?: number };
  /** the job's team (GRPO llm_as_judge calls are billed to it) */
  team_id?: string;
  port?: MessagePort;
}

export interface TrainTaskResult {
  stopped: boolean;
  result: Record<string, unknown>;
  metrics: {
    f1: number; precision: number; recall: number; accuracy?: number; sample_count: number;
    /** relation data: strict (head, tail, label) triples on the validation split */
    relation_f1?: number; relation_precision?: number; relation_recall?: number;
  } | null;
  metrics_error?: string;
}

// the training library (src/training/index.ts), imported by a computed path: it is built in
// parallel and this module must load without it
const TRAINING = '../../training/index.ts';
const ENCODER_INIT = '../../training/encoder/init.ts';

async function trainingLibrary(): Promise<Record<string, any>> {
  try {
    return (await import(TRAINING)) as Record<string, any>;
  } catch (e) {
    if ((e as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND' && !/Cannot find module/.test(String(e))) throw e;
    // before src/training/index.ts exists: the trainers' own modules
    const lib: Record<string, any> = {};
    for (const m of ['../../training/encoder-trainer.ts', '../../training/decoder-trainer.ts']) {
      try { Object.assign(lib, await import(m)); } catch { /* not built yet */ }
    }
    return lib;
  }
}

export interface InitEncoderTask { op: 'init_encoder'; dir: string; preset: string; texts_from: string[]; seed?: number; port?: MessagePort }

/** The texts of canonical JSONL records (tokenizer vocabulary of a fresh encoder). */
function* textsOf(files: string[]): Generator<string> {
  for (const f of files) {
    for (const line of readFileSync(f, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      const r = JSON.parse(line) as Record<string, unknown>;
      if (typeof r.text === 'string') yield r.text;
      else if (typeof r.input === 'string') yield r.input;
      else if (Array.isArray(r.messages)) for (const m of r.messages as Array<{ content?: unknown }>) if (typeof m.content === 'string') yield m.content;
    }
  }
}

/** A fresh GLiNER2 encoder in `dir` (what `loom init-encoder` does): no pretrained weights. */
export async function initEncoder(t: InitEncoderTask): Promise<{ dir: string; parameters: number; vocab_size: number }> {
  const mod = (await import(ENCODER_INIT)) as { initEncoder: (dir: string, cfg: unknown, texts: Iterable<string>, o?: { seed?: number; name?: string }) => { parameters: number; vocabSize: number }; ENCODER_PRESETS: Record<string, unknown> };
  const cfg = mod.ENCODER_PRESETS[t.preset];
  if (!cfg) throw new Error(`unknown encoder preset ${t.preset} (${Object.keys(mod.ENCODER_PRESETS).join(', ')})`);
  const r = mod.initEncoder(t.dir, cfg, textsOf(t.texts_from), { seed: t.seed ?? 42, name: `loom-gliner2-init-${t.preset}` });
  return { dir: t.dir, parameters: r.parameters, vocab_size: r.vocabSize };
}

/**
 * GRPO's llm_as_judge in a worker: each judge call goes to the main thread over the task's port
 * ({type: 'judge', id, items, opts}) and its answer comes back as {type: 'judge_result', id, scores, errors}
 * (the service's judge runs inference through Loom's own path, billed to the team).
 */
function judgeOverPort(port: MessagePort, rl: Record<string, unknown>, teamId: string) {
  let next = 0;
  const waiting = new Map<number, (r: { scores: number[]; errors: (string | null)[] }) => void>();
  port.on('message', (m: { type?: string; id?: number; scores?: number[]; errors?: (string | null)[] }) => {
    if (m?.type !== 'judge_result' || typeof m.id !== 'number') return;
    waiting.get(m.id)?.({ scores: m.scores ?? [], errors: m.errors ?? [] });
    waiting.delete(m.id);
  });
  const judgeOptions: JudgeRewardOptions = {
    model: String(rl.llm_judge_model), rubric: String(rl.llm_judge_rubric), scoreScale: Number(rl.llm_judge_score_scale),
    timeoutS: Number(rl.llm_judge_timeout_s), maxConcurrent: Number(rl.llm_judge_max_concurrent), maxRetries: Number(rl.llm_judge_max_retries),
    retryBackoffS: Number(rl.llm_judge_retry_backoff_s), teamId,
  };
  const judge = (items: RewardItem[], opts: JudgeRewardOptions) => new Promise<{ scores: number[]; errors: (string | null)[] }>((resolve) => {
    const id = next++;
    waiting.set(id, resolve);
    port.postMessage({ type: 'judge', data: { id, items, opts } });
  });
  return { judge, judgeOptions };
}

export async function train(t: TrainTask): Promise<TrainTaskResult> {
  const port = t.port;
  const ac = new AbortController();
  port?.on('message', (m: { type?: string }) => { if (m?.type === 'stop') ac.abort(new Error('stopped by the user')); });
  const post = (type: string, data: unknown) => port?.postMessage({ type, data });
  const training = await trainingLibrary();
  if (t.init_encoder) {
    post('log', { level: 'info', message: `initializing a fresh ${t.init_encoder.preset} encoder (tokenizer built from the training text)` });
    const r = await initEncoder({ op: 'init_encoder', dir: String(t.config.base_model), preset: t.init_encoder.preset, texts_from: t.init_encoder.texts_from, seed: t.init_encoder.seed });
    post('log', { level: 'info', message: `fresh encoder: ${(r.parameters / 1e6).toFixed(2)}M parameters, ${r.vocab_size} tokens` });
  }
  const rl = t.config.rl_config as Record<string, unknown> | undefined;
  if (t.kind === 'decoder' && rl?.reward_type === 'llm_as_judge' && port) t.config.reward_context = judgeOverPort(port, rl, t.team_id ?? '');
  const fn = t.kind === 'encoder' ? training.trainEncoder : training.trainDecoder;
  if (typeof fn !== 'function') throw new Error(`the training library has no ${t.kind === 'encoder' ? 'trainEncoder' : 'trainDecoder'}()`);
  const hooks = {
    onProgress: (p: unknown) => post('progress', p),
    onLog: (l: unknown) => post('log', l),
    onCheckpoint: (c: unknown) => post('checkpoint', c),
    signal: ac.signal,
  };
  const result = ((await fn(t.config, hooks)) ?? {}) as Record<string, unknown>;
  port?.removeAllListeners('message');
  delete t.config.reward_context;
  const stopped = ac.signal.aborted;
  let metrics: TrainTaskResult['metrics'] = null;
  let metrics_error: string | undefined;
  if (!stopped && t.score && (t.score.indices === undefined || t.score.indices.length > 0)) {
    try {
      const serveDir = String(result.final_checkpoint ?? result.merged_dir ?? result.output_dir ?? t.config.output_dir);
      let ev: EvaluateResult;
      if (t.kind === 'decoder') ev = await evaluate({ op: 'evaluate', kind: 'decoder', model_dir: String(t.config.base_model), adapter_dir: t.config.training_type === 'lora' ? serveDir : undefined, data_file: t.score.data_file, indices: t.score.indices, max_new_tokens: 64 });
      else ev = await evaluate({ op: 'evaluate', kind: 'encoder', model_dir: serveDir, data_file: t.score.data_file, indices: t.score.indices, threshold: t.score.threshold });
      metrics = { f1: ev.f1, precision: ev.precision, recall: ev.recall, ...(ev.accuracy !== undefined ? { accuracy: ev.accuracy } : {}), sample_count: ev.sample_count };
      if (ev.relations) {
        const r = ev.relations;
        Object.assign(metrics, { relation_f1: r.f1, relation_precision: r.precision, relation_recall: r.recall });
      }
    } catch (e) {
      metrics_error = (e as Error).message;
    }
  }
  return { stopped, result: JSON.parse(JSON.stringify(result)), metrics, metrics_error };
}
