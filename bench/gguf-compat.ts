// `npm run bench -- gguf-compat [--tokens N] [--models tinystories-656k,random-256]`
//
// Do the GGUF files Loom writes load in llama.cpp and decode the same? convertHfToGguf writes F16, Q8_0, Q6_K
// and Q4_K_M files of two checkpoints, and llama.cpp (node-llama-cpp 3.21.1, `npm install --prefix bench`) and
// Loom each decode them greedily from the same prompt token ids; the table gives, per file, the tensor types
// written and how many of the first N tokens the two engines agree on before they first differ.
//   tinystories-656k   ../shared/models (real weights; D = 128, so llama.cpp's rules turn Q4_K into Q5_0 and
//                      Q6_K into Q8_0: the fallback types)
//   random-256         random weights, D = 256, F = 768, 4 layers, untied, TinyStories' tokenizer: the file
//                      types keep Q4_K and Q6_K (Q4_K_M: Q6_K for output and for attn_v / ffn_down of layers 2, 3)
// Because two engines round differently, each engine's tokens are also scored against the exact reference of the
// file: its weights dequantized to f32 in Loom (TensorSource.raw removed), the engine's own tokens fed back in one
// prefill (the f32 GEMM path), and "argmax agrees" counts the steps where the engine picked the reference's best
// token. A writer or reader that misplaced bits would score near 0; rounding flips near-ties only.
// Both engines run one thread (on a shared 2-core machine, 2-thread fork-join collapses under load).
// Greedy tokens can differ where two logits are closer than the engines' rounding differences (both quantize
// activations, in different ways).
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ggmlTypeName, GgufFile } from '../src/formats/gguf.ts';
import { convertHfToGguf } from '../src/formats/gguf-hf.ts';
import { writeSafetensors } from '../src/formats/safetensors.ts';
import { loadDecoder } from '../src/runtime/generate.ts';
import { loadGgufCheckpoint } from '../src/formats/gguf-hf.ts';
import { ggufTensorSource } from '../src/models/decoder/gguf-source.ts';
import { buildNativeDecoder } from '../src/models/decoder/loader.ts';
import { NativeKvCache } from '../src/models/decoder/native-model.ts';
import { setThreads } from '../src/native/cpu.ts';

const here = import.meta.dirname;
const CACHE = join(here, '.cache', 'gguf-compat');
const TINY = join(here, '../../shared/models/tinystories-656k');

/** A random-weight Llama with rows of 256 (so Q4_K / Q6_K are kept), TinyStories' tokenizer files. */
function randomModel(): string {
  const dir = join(CACHE, 'random-256');
  if (existsSync(join(dir, 'model.safetensors'))) return dir;
  mkdirSync(dir, { recursive: true });
  const D = 256, F = 768, L = 4, H = 4, KV = 2, V = 2048, Dh = D / H;
  const cfg = {
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: D, intermediate_size: F,
    num_hidden_layers: L, num_attention_heads: H, num_key_value_heads: KV, vocab_size: V,
    max_position_embeddings: 512, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
    hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2, torch_dtype: 'float32',
  };
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg, null, 2));
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'generation_config.json'])
    if (existsSync(join(TINY, f))) copyFileSync(join(TINY, f), join(dir, f));
  let seed = 2024;
  const rnd = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) / (1 << 24) - 0.5;
  };
  const t: Record<string, { dtype: 'F32'; shape: number[]; data: Float32Array }> = {};
  // uniform weights of std ~0.1 (larger than a trained model's): peaked logits, so greedy choices have margins
  const mat = (name: string, r: number, c: number, s = 0.35) =>
    (t[name] = { dtype: 'F32', shape: [r, c], data: Float32Array.from({ length: r * c }, () => rnd() * s) });
  const norm = (name: string) =>
    (t[name] = { dtype: 'F32', shape: [D], data: Float32Array.from({ length: D }, () => 1 + rnd() * 0.2) });
  mat('model.embed_tokens.weight', V, D, 2);
  for (let i = 0; i < L; i++) {
    const p = `model.layers.${i}.`;
    norm(p + 'input_layernorm.weight');
    norm(p + 'post_attention_layernorm.weight');
    mat(p + 'self_attn.q_proj.weight', H * Dh, D);
    mat(p + 'self_attn.k_proj.weight', KV * Dh, D);
    mat(p + 'self_attn.v_proj.weight', KV * Dh, D);
    mat(p + 'self_attn.o_proj.weight', D, H * Dh);
    mat(p + 'mlp.gate_proj.weight', F, D);
    mat(p + 'mlp.up_proj.weight', F, D);
    mat(p + 'mlp.down_proj.weight', D, F);
  }
  norm('model.norm.weight');
  mat('lm_head.weight', V, D);
  writeSafetensors(join(dir, 'model.safetensors'), t);
  return dir;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

/** Steps (of tokens after the prompt) where `tokens` is the argmax of the file's dequantized-f32 logits. */
async function referenceAgreement(path: string, prompt: number[], tokens: number[]): Promise<number> {
  const ck = loadGgufCheckpoint(path);
  const src = ggufTensorSource(ck.tensors, ck.tied);
  delete src.raw;
  const model = await buildNativeDecoder(ck.config, src, { dtype: 'f32' });
  const ids = [...prompt, ...tokens], V = ck.config.vocabSize, bs = 16, nb = Math.ceil(ids.length / bs);
  const kv = new NativeKvCache(ck.config, nb, bs, 'f32');
  const out = new Float32Array(ids.length * V);
  await model.step(kv, {
    tokens: Int32Array.from(ids), positions: Int32Array.from(ids.keys()), seqLens: Int32Array.of(ids.length),
    tables: Int32Array.from({ length: nb }, (_, i) => i), tableOffsets: Int32Array.of(0, nb),
    outRows: Int32Array.from(ids.keys()),
  }, out);
  let agree = 0;
  for (let i = 0; i < tokens.length; i++) {
    const row = (prompt.length - 1 + i) * V;
    let best = 0;
    for (let v = 1; v < V; v++) if (out[row + v] > out[row + best]) best = v;
    if (best === tokens[i]) agree++;
  }
  return agree;
}

export async function run(argv: string[]): Promise<void> {
  const n = Number(argv[argv.indexOf('--tokens') + 1] || 32);
  const p = join(here, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
  if (!existsSync(p)) throw new Error('node-llama-cpp is not installed: npm install --prefix bench');
  const lib: Any = await import(pathToFileURL(p).href);
  const llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: 1 });
  setThreads(1);
  mkdirSync(CACHE, { recursive: true });
  const rows: string[] = [];
  const only = argv.includes('--models') ? argv[argv.indexOf('--models') + 1].split(',')
    : ['tinystories-656k', 'random-256'];
  const models = ([['tinystories-656k', TINY], ['random-256', '']] as const).filter(([m]) => only.includes(m));
  for (const [name, d] of models) {
    const dir = d || randomModel();
    for (const type of ['F16', 'Q8_0', 'Q6_K', 'Q4_K_M'] as const) {
      const path = join(CACHE, `${name}.${type.toLowerCase()}.gguf`);
      convertHfToGguf(dir, path, { outType: type });
      const counts = new Map<string, number>();
      for (const x of new GgufFile(path).tensors.values()) {
        if (x.shape.length !== 2) continue;
        const k = ggmlTypeName(x.type);
        counts.set(k, (counts.get(k) ?? 0) + 1);
      }
      const types = [...counts].map(([k, v]) => `${v}×${k}`).join(' ');
      const ours = await loadDecoder(path, { kv: { memory: '64MiB' } });
      const prompt = [1, ...ours.tokenizer.encode('Once upon a time, there was a little')];
      const greedy = { prompt_ids: prompt, max_tokens: n, temperature: 0, stop_at_eos: false };
      const a = (await ours.generate(greedy).result).tokenIds;
      const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
      const ctx = await model.createContext({ contextSize: 512, sequences: 1, threads: { ideal: 1, min: 1 } });
      const seq = ctx.getSequence();
      const b: number[] = [];
      for await (const tok of seq.evaluate(prompt, { temperature: 0 })) {
        b.push(tok);
        if (b.length >= n) break;
      }
      await ctx.dispose();
      await model.dispose();
      let same = 0;
      while (same < n && a[same] === b[same]) same++;
      const [ra, rb] = [await referenceAgreement(path, prompt, a), await referenceAgreement(path, prompt, b)];
      const diff = same < n ? `${a[same]} vs ${b[same]}` : '—';
      rows.push(`| ${name} | ${type} | ${types} | ${same} / ${n} | ${diff} | ` +
        `${ra} / ${n} | ${rb} / ${n} |`);
      process.stderr.write(`  [gguf-compat] ${rows[rows.length - 1]}\n`);
    }
  }
  console.log(`\nGreedy tokens, Loom vs llama.cpp (node-llama-cpp 3.21.1) on the files Loom writes (${n} tokens):\n`);
  console.log('| model | file type | 2-D tensor types | equal tokens before the first difference | ' +
    'first difference (loom vs llama.cpp) | argmax agrees: loom | argmax agrees: llama.cpp |');
  console.log('|---|---|---|---:|---|---:|---:|');
  for (const r of rows) console.log(r);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await run(process.argv.slice(2));
