// `npm run bench -- encode [--quick] [--threads N]` (or `npx tsx bench/encode.ts`):
// GLiNER2 span pipeline at the real gliner2-base-v1 configuration (DeBERTa-v3-base: hidden 768,
// 12 layers, 12 heads, FFN 3072, vocab 128 011, count_lstm_v2), random weights generated locally
// (speed does not depend on the weights), sentences of 16 / 64 / 256 words, 4 entity labels,
// batch 1 and 32: texts/s and latency, side by side with
//   (a) PyTorch CPU: transformers' DebertaV2Model at the same configuration + the span head
//       (set up once, offline, from the machine's pip mirror:
//        python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers onnx),
//   (b) onnxruntime-node on an ONNX export of that same model (npm install --prefix bench).
// Columns whose runtime is absent are skipped. Same thread count everywhere. Loom and onnxruntime
// alternate within each row; the tables give medians, and the last column the ratio of each
// engine's fastest call (what the two reach when the shared host leaves them alone).
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { cpus, loadavg } from 'node:os';
import { writeSafetensors, type TensorToWrite } from '../src/formats/safetensors.ts';
import { loadEncoder, type EncoderModel } from '../src/models/encoder/index.ts';
import { normalizeSchema } from '../src/models/encoder/schema.ts';
import { getIsa, getThreads, setThreads } from '../src/native/cpu.ts';
import { addon } from '../src/native/addon.ts';

const here = import.meta.dirname;
const cacheDir = join(here, '.cache');
const BASE = { D: 768, L: 12, H: 12, F: 3072, V: 128011 };

function rand(n: number, std: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    a[i] = ((s >>> 0) / 4294967296 - 0.5) * 3.4641 * std; // uniform with the given std
  }
  return a;
}

/** Writes a random-weight GLiNER2 span checkpoint (count_lstm_v2) in the real on-disk layout. */
function makeCheckpoint(dir: string): void {
  if (existsSync(join(dir, 'model.safetensors'))) return;
  mkdirSync(join(dir, 'encoder_config'), { recursive: true });
  const { D, L, H, F, V } = BASE;
  console.log(`generating a random gliner2-base-v1-shaped checkpoint in ${dir} (once)...`);
  const t: Record<string, TensorToWrite> = {};
  let seed = 1;
  const add = (name: string, shape: number[], std = 0.02, constant?: number) => {
    const n = shape.reduce((a, b) => a * b, 1);
    t[name] = { dtype: 'F32', shape, data: constant !== undefined ? new Float32Array(n).fill(constant) : rand(n, std, seed++) };
  };
  const lin = (p: string, o: number, i: number) => (add(`${p}.weight`, [o, i]), add(`${p}.bias`, [o], 0.01));
  const ln = (p: string, d: number) => (add(`${p}.weight`, [d], 0, 1), add(`${p}.bias`, [d], 0, 0));
  add('encoder.embeddings.word_embeddings.weight', [V, D]);
  ln('encoder.embeddings.LayerNorm', D);
  add('encoder.encoder.rel_embeddings.weight', [512, D]);
  ln('encoder.encoder.LayerNorm', D);
  for (let l = 0; l < L; l++) {
    const p = `encoder.encoder.layer.${l}.`;
    for (const q of ['query_proj', 'key_proj', 'value_proj']) lin(`${p}attention.self.${q}`, D, D);
    lin(`${p}attention.output.dense`, D, D);
    ln(`${p}attention.output.LayerNorm`, D);
    lin(`${p}intermediate.dense`, F, D);
    lin(`${p}output.dense`, D, F);
    ln(`${p}output.LayerNorm`, D);
  }
  const sp = 'span_rep.span_rep_layer.';
  for (const x of ['project_start', 'project_end']) (lin(`${sp}${x}.0`, 4 * D, D), lin(`${sp}${x}.3`, D, 4 * D));
  lin(`${sp}out_project.0`, 4 * D, 2 * D);
  lin(`${sp}out_project.3`, D, 4 * D);
  lin('classifier.0', 2 * D, D);
  lin('classifier.2', 1, 2 * D);
  lin('count_pred.0', 2 * D, D);
  lin('count_pred.2', 20, 2 * D);
  // count head biased towards count 1 so every run exercises the span path
  (t['count_pred.2.bias'].data as Float32Array)[1] = 5;
  add('count_embed.pos_embedding.weight', [20, D]);
  add('count_embed.gru.weight_ih_l0', [3 * D, D]);
  add('count_embed.gru.weight_hh_l0', [3 * D, D]);
  add('count_embed.gru.bias_ih_l0', [3 * D], 0.01);
  add('count_embed.gru.bias_hh_l0', [3 * D], 0.01);
  lin('count_embed.transformer.in_projector', 128, D);
  for (let i = 0; i < 2; i++) {
    const p = `count_embed.transformer.transformer.layers.${i}.`;
    add(`${p}self_attn.in_proj_weight`, [384, 128]);
    add(`${p}self_attn.in_proj_bias`, [384], 0.01);
    lin(`${p}self_attn.out_proj`, 128, 128);
    lin(`${p}linear1`, 256, 128);
    lin(`${p}linear2`, 128, 256);
    ln(`${p}norm1`, 128);
    ln(`${p}norm2`, 128);
  }
  lin('count_embed.transformer.out_projector.0', D, 128 + D);
  lin('count_embed.transformer.out_projector.2', D, D);
  lin('count_embed.transformer.out_projector.4', D, D);
  writeSafetensors(join(dir, 'model.safetensors'), t);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ architecture: 'span', counting_layer: 'count_lstm_v2', max_width: 8, model_name: 'microsoft/deberta-v3-base', model_type: 'extractor', token_pooling: 'first' }));
  writeFileSync(
    join(dir, 'encoder_config', 'config.json'),
    JSON.stringify({ model_type: 'deberta-v2', hidden_size: D, num_hidden_layers: L, num_attention_heads: H, intermediate_size: F, hidden_act: 'gelu', layer_norm_eps: 1e-7, max_position_embeddings: 512, relative_attention: true, position_buckets: 256, max_relative_positions: -1, pos_att_type: ['p2c', 'c2p'], share_att_key: true, norm_rel_ebd: 'layer_norm', position_biased_input: false, type_vocab_size: 0, pad_token_id: 0, vocab_size: V }),
  );
  // A real DeBERTa-v3-style tokenizer with the GLiNER2 markers (the goldens' 4k-piece one; its ids fit the 128k rows).
  copyFileSync(join(here, '../../shared/goldens/gliner2-tiny-span/tokenizer.json'), join(dir, 'tokenizer.json'));
}

async function sentences(model: EncoderModel, words: number, count: number): Promise<string[]> {
  // Whole-word pieces of the vocabulary, so that a "word" is about one token as in a real vocabulary.
  const vocab: string[] = [];
  for (let id = 5; id < 4000 && vocab.length < 600; id++) {
    const p = model.tokenizer.idToToken(id);
    if (p && /^▁[a-z]{3,}$/.test(p)) vocab.push(p.slice(1));
  }
  let s = 7;
  const out: string[] = [];
  for (let c = 0; c < count; c++) {
    const w: string[] = [];
    for (let i = 0; i < words; i++) {
      s = (s * 1103515245 + 12345) >>> 0;
      w.push(vocab[s % vocab.length]);
    }
    out.push(w.join(' ') + '.');
  }
  return out;
}

type Timing = { s: number; cpu: number }; // median wall seconds, median process CPU seconds (all threads)
type Samples = { times: number[]; cpus: number[] }; // per call: wall ms, process CPU ms

// Calls fn at least minReps times and until `seconds` have passed (at most 50 calls), adding each
// call's wall and process CPU time to `into`.
async function sample(fn: () => Promise<unknown>, minReps: number, seconds: number, into: Samples): Promise<void> {
  const end = performance.now() + seconds * 1000;
  for (let n = 0; n < minReps || (performance.now() < end && n < 50); n++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await fn();
    into.times.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    into.cpus.push((c.user + c.system) / 1000);
  }
}

function summarize(x: Samples): Timing & { best: number } {
  const med = (a: number[]) => [...a].sort((p, q) => p - q)[Math.floor(a.length / 2)] / 1000;
  return { s: med(x.times), cpu: med(x.cpus), best: Math.min(...x.times) / 1000 };
}

export async function run(argv: string[] = []): Promise<void> {
  const quick = argv.includes('--quick');
  const ti = argv.indexOf('--threads');
  if (ti >= 0) setThreads(Number(argv[ti + 1]));
  const threads = getThreads();
  const dir = join(cacheDir, 'gliner2-base-random');
  makeCheckpoint(dir);
  const model = await loadEncoder(dir);
  const labels = ['person', 'organization', 'location', 'product'];
  const schema = normalizeSchema(labels);
  const lengths = quick ? [16, 64] : [16, 64, 256];
  const batches = [1, 32];
  const secs = quick ? 1 : 4;
  type Row = { words: number; B: number; N: number; W: number; loom: number; loomCpu: number; torch?: number; torchCpu?: number; ort?: number; ortCpu?: number; loomBest?: number; ortBest?: number };
  // How fast this machine is for us at the start and the end: the FMA loop on our threads in wall
  // time (a shared host shows here; CPU-time peaks do not move). null without AVX2/AVX-512.
  const probe = (): number | null => addon.benchPeak(getIsa() === 'avx512' ? 'avx512' : 'avx2', threads, 0.3, true) as number | null;
  const probe0 = probe();
  const load0 = loadavg()[0];
  const rows: Row[] = [];
  const calls: (() => Promise<unknown>)[] = [];
  for (const words of lengths) {
    const texts = await sentences(model, words, 32);
    const f = await model.format(texts[0], schema);
    for (const B of batches) {
      const batch = texts.slice(0, B);
      rows.push({ words, B, N: f.ids.length, W: f.wordPos.length, loom: 0, loomCpu: 0 }); // timed below
      calls.push(() => (B === 1 ? model.extract(batch[0], labels) : model.extract(batch, labels)));
    }
  }
  // PyTorch (+ ONNX export for onnxruntime): its own process, run first (it writes the ONNX file)
  const py = join(here, '.venv', 'bin', 'python');
  const onnxPath = join(cacheDir, 'gliner2-base-random.onnx');
  if (existsSync(py)) {
    const job = {
      ...BASE,
      threads,
      runs: rows.map((r) => ({ B: r.B, N: r.N, W: r.W, seconds: secs, min_reps: quick ? 2 : 3, max_reps: 50 })),
      onnx_out: existsSync(onnxPath) ? undefined : onnxPath,
    };
    const jp = join(cacheDir, 'torch-job.json');
    writeFileSync(jp, JSON.stringify(job));
    try {
      const out = JSON.parse(execFileSync(py, [join(here, 'encode_torch.py'), jp], { encoding: 'utf8', maxBuffer: 1 << 24, env: { ...process.env, OMP_NUM_THREADS: String(threads) } }).trim().split('\n').pop()!);
      out.runs.forEach((r: { median_s: number; median_cpu_s?: number }, i: number) => ((rows[i].torch = r.median_s), (rows[i].torchCpu = r.median_cpu_s)));
      if (out.onnx_error) console.log(`onnx export failed: ${out.onnx_error}`);
      console.log(`pytorch ${out.torch}, ${out.threads} threads`);
    } catch (e) {
      console.log(`pytorch column skipped: ${(e as Error).message.split('\n')[0]}`);
    }
  } else console.log('pytorch column skipped: bench/.venv missing (python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers onnx)');
  // onnxruntime-node, in this process
  let ort: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  try {
    ort = createRequire(join(here, 'package.json'))('onnxruntime-node');
  } catch {
    console.log('onnxruntime column skipped: npm install --prefix bench');
  }
  const sess = ort && existsSync(onnxPath)
    ? await ort.InferenceSession.create(onnxPath, { intraOpNumThreads: threads, interOpNumThreads: 1, graphOptimizationLevel: 'all' })
    : null;
  // Loom and onnxruntime alternate within each row (rounds of each), so that a change in the
  // machine's speed during the run (a shared host) falls on both columns alike. Each engine's pool
  // threads spin for a while after a call (onnxruntime's by default, ours briefly): a pause before
  // each switch lets the other engine's threads go to sleep first, so neither is timed (wall or
  // process CPU) against the other's spinning.
  const settle = () => new Promise((r) => setTimeout(r, 300));
  const rounds = quick ? 2 : 3;
  for (const [i, r] of rows.entries()) {
    const feeds = sess && {
      input_ids: new ort.Tensor('int64', BigInt64Array.from({ length: r.B * r.N }, (_, i) => BigInt(5 + ((i * 7919) % 3990))), [r.B, r.N]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(r.B * r.N).fill(1n), [r.B, r.N]),
      word_pos: new ort.Tensor('int64', BigInt64Array.from({ length: r.B * r.W }, (_, i) => BigInt(r.N - r.W + (i % r.W))), [r.B, r.W]),
      label_pos: new ort.Tensor('int64', BigInt64Array.from({ length: r.B * 4 }, (_, i) => BigInt(1 + 2 * (i % 4))), [r.B, 4]),
    };
    const ours: Samples = { times: [], cpus: [] }, theirs: Samples = { times: [], cpus: [] };
    const ortCall = () => sess.run(feeds);
    // the first call after a switch finds the other engine's data in the caches: untimed when short
    // (Loom's first round follows its own warm-up call; onnxruntime's first call is always untimed)
    const t0 = performance.now();
    await calls[i]();
    const rewarm = performance.now() - t0 < 1000;
    for (let k = 0; k < rounds; k++) {
      await settle();
      if (rewarm && k > 0) await calls[i]();
      await sample(calls[i], 1, secs / rounds, ours);
      if (!sess) continue;
      await settle();
      if (rewarm || k === 0) await ortCall();
      await sample(ortCall, 1, secs / rounds, theirs);
    }
    const m = summarize(ours);
    r.loom = m.s;
    r.loomCpu = m.cpu;
    r.loomBest = m.best;
    if (sess) ({ s: r.ort, cpu: r.ortCpu, best: r.ortBest } = summarize(theirs));
    console.log(`loom  words=${r.words} B=${r.B} N=${r.N}: ${(m.s * 1000).toFixed(1)} ms/call, ${(r.B / m.s).toFixed(1)} texts/s, CPU ${(m.cpu * 1000).toFixed(1)} ms/call` +
      (r.ort ? `; onnxruntime ${(r.ort * 1000).toFixed(1)} ms/call` : ''));
  }
  const fmt = (s?: number, B = 1) => (s === undefined ? '—' : `${(B / s).toFixed(1)} (${(s * 1000).toFixed(0)} ms)`);
  const load1 = loadavg()[0];
  const probe1 = probe();
  console.log(`\nGLiNER2 base config, 4 labels, ${threads} threads, ${cpus().length} cores (${cpus()[0]?.model.trim()}), load average ${load0.toFixed(1)} at start, ${load1.toFixed(1)} at end, FMA loop in wall time ${probe0?.toFixed(0) ?? 'n/a'} / ${probe1?.toFixed(0) ?? 'n/a'} GFLOP/s at start / end — texts/s (latency per call)`);
  console.log('| words | batch | tokens | Loom | PyTorch | onnxruntime | Loom/PyTorch | Loom/ORT | Loom/ORT, fastest calls |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(
      `| ${r.words} | ${r.B} | ${r.N} | ${fmt(r.loom, r.B)} | ${fmt(r.torch, r.B)} | ${fmt(r.ort, r.B)} | ${r.torch ? (r.torch / r.loom).toFixed(2) + '×' : '—'} | ${r.ort ? (r.ort / r.loom).toFixed(2) + '×' : '—'} | ${r.ortBest && r.loomBest ? (r.ortBest / r.loomBest).toFixed(2) + '×' : '—'} |`,
    );
  // CPU time (user + system of the whole process, every thread) per call: robust to other jobs on a
  // shared machine, unlike wall time; with --threads 1 it is the work each engine does per text.
  const cms = (c?: number, B = 1) => (c === undefined ? '—' : `${((c * 1000) / B).toFixed(1)}`);
  console.log(`\nCPU time per text (ms, process user+system over all threads, median call / batch size)`);
  console.log('| words | batch | Loom | PyTorch | onnxruntime | PyTorch/Loom | ORT/Loom |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(
      `| ${r.words} | ${r.B} | ${cms(r.loomCpu, r.B)} | ${cms(r.torchCpu, r.B)} | ${cms(r.ortCpu, r.B)} | ${r.torchCpu ? (r.torchCpu / r.loomCpu).toFixed(2) + '×' : '—'} | ${r.ortCpu ? (r.ortCpu / r.loomCpu).toFixed(2) + '×' : '—'} |`,
    );
}

if (process.argv[1] && process.argv[1].endsWith('encode.ts')) await run(process.argv.slice(2));
