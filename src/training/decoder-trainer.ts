// Decoder LoRA training on the native graph, shared by every algorithm: base weights, the LoRA (fresh or
// continued from an adapter), the data split, AdamW with warmup + linear/cosine decay, validation, early
// stopping, PEFT adapter checkpoints (adapter_config.json + adapter_model.safetensors) that
// src/runtime/adapters.ts serves. What a step computes comes from the algorithm registry
// (src/training/algorithms: sft on chat records, dpo on preference pairs, grpo on prompts + answers).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadDecoderConfig, type DecoderConfig } from '../formats/hf-config.ts';
import { SafetensorsCheckpoint, toFloat32, writeSafetensors, type TensorToWrite } from '../formats/safetensors.ts';
import { LORA_MODULES } from '../models/decoder/native-model.ts';
import { AdapterError, readPeftAdapter } from '../runtime/adapters.ts';
import { adapterConflict } from './adapter-shape.ts';
import { Tokenizer } from '../tokenize/tokenizer.ts';
import type { RewardContext } from '../rl/rewards/index.ts';
import type { DataRecord } from './data/formats.ts';
import { InitRng } from './encoder/init.ts';
import { DecoderTrainGraph, type DecoderLoraInit } from './native.ts';
import { decoderAlgorithm } from './algorithms/index.ts';
import { parseRlConfig, type RlAlgorithm, type RlConfig } from './algorithms/rl-config.ts';
import type { AlgorithmName } from './algorithms/types.ts';
import { setThreads } from '../native/cpu.ts';
import {
  CheckpointBook, runTrainingLoop, loadRecords, log, positiveInt, positiveNum, splitValidation, TrainingConfigError,
  trainPrecision, type CommonTrainConfig, type TrainHooks, type TrainResult,
} from './common.ts';
import { resolvePrecision } from './precision.ts';

export { chatToSequence, packSequences, type SftSequence } from './algorithms/sft.ts';

export interface DecoderTrainConfig extends CommonTrainConfig {
  /** tokens per sequence (longer conversations are truncated); default 1024 */
  max_seq_len?: number;
  /** 'bf16' keeps the frozen base weights in bf16 (half the memory); default: as stored */
  base_dtype?: 'f32' | 'bf16';
  /** a PEFT adapter of this base to continue training from (its rank, alpha and target modules) */
  init_adapter?: string;
  /** 'sft' (default, chat records), 'dpo' ({prompt, chosen, rejected}) or 'grpo' ({prompt, answer}) */
  training_algorithm?: AlgorithmName;
  /** DPO / GRPO options (src/training/algorithms/rl-config.ts) */
  rl_config?: Record<string, unknown>;
  /** GRPO llm_as_judge: the service's judge (not serializable; set by the caller in-process) */
  reward_context?: RewardContext;
}

export function baseTensors(dir: string, config: DecoderConfig, dtype?: 'f32' | 'bf16'): Record<string, Float32Array | Uint16Array> {
  const ck = SafetensorsCheckpoint.open(dir);
  const out: Record<string, Float32Array | Uint16Array> = {};
  for (const n of ck.names()) {
    const t = ck.get(n);
    const isLinear = /(_proj|lm_head|embed_tokens)\.weight$/.test(n);
    const keepBf16 = isLinear && (dtype === 'bf16' || (dtype === undefined && t.dtype === 'BF16'));
    if (keepBf16 && t.dtype === 'BF16') out[n] = new Uint16Array(t.bytes.buffer, t.bytes.byteOffset, t.bytes.byteLength / 2).slice();
    else if (keepBf16) {
      const f = toFloat32(t);
      const u = new Uint16Array(f.length);
      const v = new Uint32Array(f.buffer, f.byteOffset, f.length);
      for (let i = 0; i < f.length; i++) u[i] = (v[i] + 0x7fff + ((v[i] >>> 16) & 1)) >>> 16; // round to nearest even
      out[n] = u;
    } else out[n] = toFloat32(t);
  }
  if (!config.tieWordEmbeddings && !out['lm_head.weight']) throw new TrainingConfigError(`${dir}: lm_head.weight missing`);
  return out;
}

/** LoRA init as PEFT: A Kaiming-uniform (bound 1/√in), B zeros. */
export function initLoras(config: DecoderConfig, targets: string[], r: number, alpha: number, dropout: number, seed: number): DecoderLoraInit[] {
  const rng = new InitRng(seed);
  const D = config.hiddenSize;
  const dims: Record<string, [number, number]> = {
    q_proj: [config.numHeads * config.headDim, D], k_proj: [config.numKvHeads * config.headDim, D], v_proj: [config.numKvHeads * config.headDim, D],
    o_proj: [D, config.numHeads * config.headDim], gate_proj: [config.intermediateSize, D], up_proj: [config.intermediateSize, D], down_proj: [D, config.intermediateSize],
  };
  const out: DecoderLoraInit[] = [];
  for (let l = 0; l < config.numLayers; l++)
    for (const t of targets) {
      const module = LORA_MODULES.indexOf(t as (typeof LORA_MODULES)[number]);
      const [N, K] = dims[t];
      const b = 1 / Math.sqrt(K);
      out.push({ layer: l, module, r, scale: alpha / r, dropout, A: Float32Array.from({ length: r * K }, () => (rng.uniform() * 2 - 1) * b), B: new Float32Array(N * r) });
    }
  return out;
}

/**
 * The LoRA a decoder run starts from: fresh (PEFT init, lora_r / lora_alpha / lora_target_modules,
 * defaults 16 / 32 / q,k,v,o) or, with `init_adapter`, that adapter's weights with its own rank, alpha
 * and targets; a config that names other values is refused.
 */
export function resolveLora(config: DecoderTrainConfig, dc: DecoderConfig, dropout: number, seed: number): { r: number; alpha: number; targets: string[]; loras: DecoderLoraInit[] } {
  if (config.init_adapter) {
    let ad;
    try { ad = readPeftAdapter(config.init_adapter, dc); } catch (e) {
      if (e instanceof AdapterError) throw new TrainingConfigError(`init_adapter: ${e.message}`);
      throw e;
    }
    const conflict = adapterConflict(config, ad);
    if (conflict) throw new TrainingConfigError(conflict);
    const loras = ad.modules.map((m) => ({ ...m, dropout }));
    return { r: ad.r, alpha: ad.alpha, targets: ad.targetModules, loras };
  }
  const r = positiveInt(config.lora_r, 'lora_r', 16);
  const alpha = positiveNum(config.lora_alpha, 'lora_alpha', 32);
  const targets = config.lora_target_modules ?? ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
  for (const t of targets) if (!(LORA_MODULES as readonly string[]).includes(t)) throw new TrainingConfigError(`lora_target_modules: ${t} is not one of ${LORA_MODULES.join(', ')}`);
  return { r, alpha, targets, loras: initLoras(dc, targets, r, alpha, dropout, seed) };
}

/** Writes the adapter in PEFT format. */
export function savePeftAdapter(dir: string, graph: DecoderTrainGraph, meta: { base: string; r: number; alpha: number; dropout: number; targets: string[] }): void {
  mkdirSync(dir, { recursive: true });
  const tensors: Record<string, TensorToWrite> = {};
  for (const p of graph.params()) if (p.trainable) tensors[p.name] = { dtype: 'F32', shape: p.shape, data: graph.get(p.name) };
  writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors, { format: 'pt' });
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA', task_type: 'CAUSAL_LM', r: meta.r, lora_alpha: meta.alpha, lora_dropout: meta.dropout, target_modules: meta.targets,
    bias: 'none', use_rslora: false, use_dora: false, fan_in_fan_out: false, inference_mode: true, base_model_name_or_path: meta.base,
    rank_pattern: {}, alpha_pattern: {}, modules_to_save: null,
  }, null, 2));
}

/** LoRA SFT of a Llama-family decoder. See src/training/index.ts for the API. */
export async function trainDecoder(config: DecoderTrainConfig, hooks: TrainHooks = {}): Promise<TrainResult> {
  const t0 = Date.now();
  if ((config.training_type ?? 'lora') !== 'lora') throw new TrainingConfigError('decoder models support training_type "lora" only');
  if (!config.output_dir) throw new TrainingConfigError('output_dir is required');
  if (config.threads !== undefined) setThreads(positiveInt(config.threads, 'threads', 1));
  const asked = trainPrecision(config.precision); // a bad value fails before any data is read
  const algo = decoderAlgorithm(config.training_algorithm ?? 'sft');
  const rl = algo.name === 'sft' ? null : rlConfigOf(algo.name, config.rl_config);
  if (algo.name === 'sft' && config.rl_config !== undefined) throw new TrainingConfigError('rl_config must be omitted for sft');
  const seed = positiveInt(config.seed, 'seed', 42, 0);
  const epochs = positiveInt(config.nr_epochs, 'nr_epochs', 3);
  const bs = positiveInt(config.batch_size, 'batch_size', 4);
  const accum = positiveInt(config.gradient_accumulation_steps, 'gradient_accumulation_steps', 1);
  const lr = positiveNum(config.learning_rate, 'learning_rate', 2e-4);
  const wd = positiveNum(config.weight_decay, 'weight_decay', 0, true);
  const maxNorm = positiveNum(config.max_grad_norm, 'max_grad_norm', 1.0, true);
  const patience = positiveInt(config.early_stopping_patience, 'early_stopping_patience', 0, 0);
  const valPct = positiveNum(config.validation_data_percentage, 'validation_data_percentage', 10, true);
  const maxSteps = rl?.max_steps || positiveInt(config.max_steps, 'max_steps', 0, 0);
  const dropout = positiveNum(config.lora_dropout, 'lora_dropout', 0, true);
  if (dropout >= 1) throw new TrainingConfigError('lora_dropout must be < 1');
  const sched = config.scheduler ?? 'cosine';

  const dc = loadDecoderConfig(config.base_model);
  const maxLen = Math.min(positiveInt(config.max_seq_len, 'max_seq_len', 1024, 2), dc.maxPositionEmbeddings);
  const { r, alpha, targets, loras: initial } = resolveLora(config, dc, dropout, seed);
  const tok = Tokenizer.fromDirSync(config.base_model);
  const all = loadRecords(config.train_data, algo.recordKinds);
  let trainRecs: DataRecord[];
  let valRecs: DataRecord[];
  if (config.validation_data) ((trainRecs = all), (valRecs = loadRecords(config.validation_data, algo.recordKinds)));
  else ({ train: trainRecs, val: valRecs } = splitValidation(all, valPct, seed));
  for (const [what, recs] of [['train_data', all], ['validation_data', valRecs]] as const) {
    const bad = recs.findIndex((x) => !algo.recordKinds.includes(x.kind));
    if (bad >= 0) {
      const kinds = algo.recordKinds.join('/');
      throw new TrainingConfigError(`${what}: record ${bad + 1} is a ${recs[bad].kind} record; ${algo.name} trains on ${kinds} records`);
    }
  }
  const { precision, reason: precisionWhy } = await resolvePrecision(asked);
  log(hooks, 'info', precisionWhy);
  const graph = DecoderTrainGraph.create(dc, baseTensors(config.base_model, dc, config.base_dtype), initial, precision);
  const saveAdapter = (dir: string) => savePeftAdapter(dir, graph, { base: config.base_model, r, alpha, dropout, targets });
  const run = await algo.prepare({
    baseDir: config.base_model, dc, tok, graph, hooks, maxLen, batchSize: bs, seed, rl, rewardContext: config.reward_context, saveAdapter,
  }, trainRecs, valRecs);
  try {
    log(hooks, 'info', `${run.describe}; LoRA r=${r} alpha=${alpha} on ${targets.join(', ')}${config.init_adapter ? ' (continued from an adapter)' : ''}`);
    const perEpoch = run.items.length > bs ? Math.floor(run.items.length / bs) : 1;
    const stepsPerEpoch = Math.max(1, Math.floor(perEpoch / accum));
    let totalSteps = stepsPerEpoch * epochs;
    if (maxSteps) totalSteps = Math.min(totalSteps, maxSteps);
    const warmup = config.warmup_steps ?? Math.round((config.warmup_ratio ?? 0.03) * totalSteps);
    const evalEvery = config.eval_steps ?? stepsPerEpoch;
    mkdirSync(config.output_dir, { recursive: true });
    const { reward_context: _rc, ...saved } = config;
    writeFileSync(join(config.output_dir, 'training_config.json'), JSON.stringify({ ...saved, train_data: typeof config.train_data === 'string' ? config.train_data : `${all.length} records`, validation_data: undefined, resolved: { algorithm: algo.name, rl_config: rl ?? undefined, totalSteps, warmup, targets, r, alpha, precision } }, null, 2));
    const book = new CheckpointBook(config.output_dir, positiveInt(config.save_total_limit, 'save_total_limit', 3), hooks);
    return await runTrainingLoop({
      outputDir: config.output_dir, hooks, t0, items: run.items, batchSize: bs, accum, epochs, perEpoch, totalSteps, evalEvery,
      patience, maxSteps, seed, scheduler: sched, warmup, book, evalUntrainedOnAbort: true,
      zeroGrad: () => graph.zeroGrad(),
      microStep: (items, o) => run.microStep(items, o),
      optimizerStep: (step, f) => graph.optimizerStep({ lr: [lr * f], weightDecay: wd, maxGradNorm: maxNorm, step }),
      afterStep: run.afterStep ? (step, last) => run.afterStep!(step, last) : undefined,
      evaluate: () => run.evaluate(),
      writeCheckpoint: saveAdapter,
    });
  } finally {
    await run.close?.();
  }
}

/** The validated rl_config of a DPO / GRPO run (first problem as a TrainingConfigError). */
function rlConfigOf(algo: RlAlgorithm, raw: unknown): RlConfig {
  if (raw === undefined) throw new TrainingConfigError(`${algo} needs rl_config`);
  const { config, problems } = parseRlConfig(algo, raw);
  if (problems.length) throw new TrainingConfigError(`${problems[0].path}: ${problems[0].message}`);
  return config;
}
