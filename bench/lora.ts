// `npm run bench -- lora [--quick] [--json] [--model lora-bench-31m|smollm2-135m|qwen2.5-0.5b] [--adapters 16]
//   [--streams 32] [--rank 8] [--targets attn|all] [--tokens 48] [--rounds 3] [--threads N]`
//
// Many adapters, one base: aggregate decode tokens/s of `--streams` concurrent greedy streams spread round-robin
// over `--adapters` random LoRA adapters on ONE loaded base, against the same streams on the base alone. The
// adapters are shaped as Loom's decoder training makes them by default (rank 8 on q, k, v, o; `--targets all`
// adds gate, up, down); PEFT files written by test/decoder/random-lora.ts, read by the runtime's own reader.
// Rounds alternate base / adapters so a loaded machine slows both alike; the median of each is
// reported. Aggregate = tokens after each stream's first token over the time from the last first token to the end
// (prompt processing not counted), as `bench -- decode` counts it. Memory: the base's resident weight bytes, the
// adapters' bytes (A and B kept as the service keeps them: adapterDtype, bf16 over this bf16 base unless
// LOOM_LORA_DTYPE=f32), and what one base per adapter would take instead.
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { rmSync } from 'node:fs';
import { loadDecoderConfig, type DecoderConfig } from '../src/formats/hf-config.ts';
import { SafetensorsCheckpoint } from '../src/formats/safetensors.ts';
import { buildNativeDecoder, type TensorSource } from '../src/models/decoder/loader.ts';
import type { NativeDecoder } from '../src/models/decoder/native-model.ts';
import { adapterBytes, adapterDtype, readPeftAdapter } from '../src/runtime/adapters.ts';
import { KvCacheManager } from '../src/runtime/kv-cache.ts';
import { PrefixCache } from '../src/runtime/prefix-cache.ts';
import { Scheduler } from '../src/runtime/scheduler.ts';
import { setThreads } from '../src/native/cpu.ts';
import { CACHE, CONFIGS, ensureRandomCheckpoint } from './decode/models.ts';
import { ALL_MODULES, ATTENTION_MODULES, writeRandomLora } from '../test/decoder/random-lora.ts';

// a Llama-family configuration small enough for a loaded 2-core machine (about 31M parameters)
CONFIGS['lora-bench-31m'] ??= {
  architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 512, intermediate_size: 1408,
  num_hidden_layers: 8, num_attention_heads: 8, num_key_value_heads: 4, vocab_size: 16384,
  max_position_embeddings: 2048, rms_norm_eps: 1e-5, rope_theta: 10000, rope_scaling: null,
  tie_word_embeddings: true, attention_bias: false, hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2,
  torch_dtype: 'bfloat16',
};

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

function prompts(n: number, len: number, V: number): number[][] {
  let s = 7;
  return Array.from({ length: n }, () => Array.from({ length: len }, () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return 300 + (s % (V - 300));
  }));
}

/**
 * Runs the streams concurrently (greedy); returns the steady aggregate decode tokens/s (wall clock) and the
 * tokens per CPU-second of this process over the whole run (steadier on a shared, loaded machine).
 */
function aggregate(
  sched: Scheduler, cfg: DecoderConfig, ps: number[][], adapters: number[], maxTokens: number,
): Promise<{ wall: number; cpu: number }> {
  const V = cfg.vocabSize;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  return Promise.all(ps.map((prompt, i) => new Promise<{ ttft: number; end: number; n: number }>((resolve, reject) => {
    let ttft = 0;
    let n = 0;
    sched.submit({
      prompt, maxTokens, adapter: adapters[i], cache: { mode: 'none' },
      handler: {
        next: (logits) => {
          if (n++ === 0) ttft = performance.now() - t0;
          let best = 0;
          for (let k = 1; k < V; k++) if (logits[k] > logits[best]) best = k;
          return best;
        },
        done: () => resolve({ ttft, end: performance.now() - t0, n }),
        fail: reject,
      },
    });
  }))).then((rs) => {
    const c = process.cpuUsage(c0);
    const start = Math.max(...rs.map((x) => x.ttft));
    const end = Math.max(...rs.map((x) => x.end));
    const total = rs.reduce((a, x) => a + x.n, 0);
    const wall = rs.reduce((a, x) => a + x.n - 1, 0) / ((end - start) / 1000);
    return { wall, cpu: total / ((c.user + c.system) / 1e6) };
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function run(argv: string[]): Promise<void> {
  const quick = argv.includes('--quick');
  const json = argv.includes('--json');
  const name = flag(argv, '--model') ?? 'lora-bench-31m';
  const nAdapters = Number(flag(argv, '--adapters') ?? 16);
  const streams = Number(flag(argv, '--streams') ?? 32);
  const rank = Number(flag(argv, '--rank') ?? 8);
  const targetsName = flag(argv, '--targets') ?? 'attn';
  if (targetsName !== 'attn' && targetsName !== 'all') throw new Error('--targets: attn or all');
  const targets = targetsName === 'all' ? ALL_MODULES : ATTENTION_MODULES;
  const tokens = Number(flag(argv, '--tokens') ?? (quick ? 24 : 48));
  const rounds = Number(flag(argv, '--rounds') ?? (quick ? 2 : 3));
  const threads = Number(flag(argv, '--threads') ?? cpus().length);
  if (!CONFIGS[name]) throw new Error(`unknown --model ${name}; one of ${Object.keys(CONFIGS).join(', ')}`);
  setThreads(threads);
  const dir = ensureRandomCheckpoint(name);
  const cfg = loadDecoderConfig(dir);
  const src = SafetensorsCheckpoint.open(dir) as unknown as TensorSource;
  const model: NativeDecoder = await buildNativeDecoder(cfg, src, { dtype: 'bf16' });
  const adDir = join(CACHE, `${name}-lora-r${rank}-${targetsName}`);
  rmSync(adDir, { recursive: true, force: true });
  let adapterTotal = 0;
  const dtype = adapterDtype(model.weightDtype);
  for (let a = 0; a < nAdapters; a++) {
    const shape = CONFIGS[name] as never;
    const d = writeRandomLora(join(adDir, String(a)), shape, { r: rank, seed: 1000 + a, std: 0.02, targets });
    const { modules } = readPeftAdapter(d, cfg);
    model.loadAdapter(a + 1, modules, dtype);
    adapterTotal += adapterBytes(modules, dtype);
  }
  const kv = new KvCacheManager(cfg, { memory: '256MiB', weightDtype: model.weightDtype });
  const sched = new Scheduler(model, kv, new PrefixCache(kv, { minTokens: 16 }), { maxRunning: 64, maxQueue: 1024 });
  const ps = prompts(streams, 16, cfg.vocabSize);
  const none = ps.map(() => -1);
  const spread = ps.map((_, i) => 1 + (i % nAdapters));
  const load0 = loadavg()[0];
  console.log(`lora bench: ${name}, ${streams} streams, ${nAdapters} adapters of rank ${rank} on ` +
    `${targets.join(', ')} (${dtype}), ` +
    `${tokens} tokens each, ` +
    `${threads} threads, ${rounds} rounds; load average ${load0.toFixed(1)} on ${cpus().length} CPUs ` +
    `(${cpus()[0]?.model})`);
  await aggregate(sched, cfg, ps.slice(0, 4), none.slice(0, 4), 4); // warm-up
  const base: { wall: number; cpu: number }[] = [];
  const lora: { wall: number; cpu: number }[] = [];
  for (let r = 0; r < rounds; r++) {
    base.push(await aggregate(sched, cfg, ps, none, tokens));
    lora.push(await aggregate(sched, cfg, ps, spread, tokens));
    if (!json) {
      console.log(`  round ${r + 1}: base ${base[r].wall.toFixed(1)} tok/s (${base[r].cpu.toFixed(1)} per CPU-s), ` +
        `${nAdapters} adapters ${lora[r].wall.toFixed(1)} tok/s (${lora[r].cpu.toFixed(1)} per CPU-s)`);
    }
  }
  const med = (xs: { wall: number; cpu: number }[], k: 'wall' | 'cpu') => median(xs.map((x) => x[k]));
  const row = {
    model: name, streams, adapters: nAdapters, rank, targets: targetsName, threads,
    base_tok_s: med(base, 'wall'), lora_tok_s: med(lora, 'wall'), ratio: med(lora, 'wall') / med(base, 'wall'),
    base_tok_per_cpu_s: med(base, 'cpu'), lora_tok_per_cpu_s: med(lora, 'cpu'),
    cpu_ratio: med(lora, 'cpu') / med(base, 'cpu'),
    weight_bytes: model.weightBytes, adapter_dtype: dtype, adapter_bytes: adapterTotal, kv_bytes: kv.bytes,
    load_average: [load0, loadavg()[0]],
  };
  if (json) { console.log(JSON.stringify(row)); return; }
  const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
  const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
  console.log('\n| model | threads | streams | adapters (rank) | base alone tok/s | over adapters tok/s | ratio | ' +
    'tok per CPU-s base / adapters | ratio | base weights | adapters | one base per adapter |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  console.log(`| ${name} | ${threads} | ${streams} | ${nAdapters} (r=${rank}, ${targetsName}) | ` +
    `${row.base_tok_s.toFixed(1)} | ` +
    `${row.lora_tok_s.toFixed(1)} | ${pct(row.ratio)} | ${row.base_tok_per_cpu_s.toFixed(1)} / ` +
    `${row.lora_tok_per_cpu_s.toFixed(1)} | ${pct(row.cpu_ratio)} | ${mb(row.weight_bytes)} | ${mb(adapterTotal)} | ` +
    `${mb(nAdapters * row.weight_bytes)} |`);
  console.log(`target: ≥ 80% of the base alone (wall ${row.ratio >= 0.8 ? 'met' : 'NOT met'}, CPU time ` +
    `${row.cpu_ratio >= 0.8 ? 'met' : 'NOT met'}); memory: one base + adapters = ` +
    `${mb(row.weight_bytes + adapterTotal)} instead of ${mb(nAdapters * row.weight_bytes)}`);
}
