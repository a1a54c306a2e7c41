import t from 'tap';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SafetensorsCheckpoint, writeSafetensors } from '../../src/formats/safetensors.ts';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { dequantize, GgmlType, GgufError, GgufFile, gv, type GgufValue } from '../../src/formats/gguf.ts';
import { writeGguf } from '../../src/formats/gguf-writer.ts';
import {
  convertHfToGguf, ggufToHfName, hfToGgufName, llama3ParamsFromFactors, llama3RopeFactors, loadGgufCheckpoint, permuteRows,
} from '../../src/formats/gguf-hf.ts';
import { quantizeQ8_0 } from '../../src/formats/gguf-quantize.ts';
import { f32ToF16 } from '../../src/formats/f16.ts';
import { ggufPreTokenizerName } from '../../src/formats/gguf-tokenizer.ts';
import { ropeInvFreq } from '../../src/native/ops.ts';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');
const tmp = mkdtempSync(join(tmpdir(), 'loom-gguf-'));

t.test('writer/reader round trip: metadata types, alignment, F32/F16/Q8_0', async (t) => {
  const p = join(tmp, 'a.gguf');
  const f = new Float32Array(64).map((_, i) => Math.sin(i) * 3);
  const h = new Uint16Array(64).map((_, i) => f32ToF16(f[i]));
  writeGguf(p, {
    metadata: { 'general.architecture': 'llama', 'x.u32': gv.u32(7), 'x.f32': 0.5, 'x.neg': -3, 'x.bool': true, 'x.arr': ['a', 'bc'], 'x.farr': gv.arr(6, [1.5, 2]) },
    tensors: {
      f32: { type: GgmlType.F32, shape: [2, 32], data: new Uint8Array(f.buffer) },
      f16: { type: GgmlType.F16, shape: [64], data: new Uint8Array(h.buffer) },
      q8: { type: GgmlType.Q8_0, shape: [2, 32], data: quantizeQ8_0(f) },
    },
  });
  const g = new GgufFile(p);
  t.equal(g.version, 3);
  t.same([g.meta('x.u32'), g.meta('x.f32'), g.meta('x.neg'), g.meta('x.bool'), g.meta('x.arr'), g.meta('x.farr')], [7, 0.5, -3, true, ['a', 'bc'], [1.5, 2]]);
  t.equal(g.dataOffset % 32, 0);
  for (const ti of g.tensors.values()) t.equal(ti.offset % 32, 0);
  t.same(g.get('f32').ne, [32, 2]);
  t.same(g.get('f32').shape, [2, 32]);
  t.same(Array.from(g.float32('f32')), Array.from(f));
  const f16 = g.float32('f16');
  t.ok(f16.every((v, i) => Math.abs(v - f[i]) <= 2e-3), 'f16 within rounding');
  const q = g.float32('q8');
  const maxErr = Math.max(...Array.from(q, (v, i) => Math.abs(v - f[i])));
  t.ok(maxErr <= 3 / 127, `Q8_0 within one step (${maxErr})`);
});

t.test('name mapping and Q/K permutation (llama.cpp convert_hf_to_gguf.permute)', async (t) => {
  t.equal(hfToGgufName('model.embed_tokens.weight'), 'token_embd.weight');
  t.equal(hfToGgufName('model.layers.3.self_attn.q_proj.weight'), 'blk.3.attn_q.weight');
  t.equal(hfToGgufName('model.layers.0.mlp.down_proj.weight'), 'blk.0.ffn_down.weight');
  t.equal(ggufToHfName('blk.1.ffn_norm.weight'), 'model.layers.1.post_attention_layernorm.weight');
  t.equal(ggufToHfName('output.weight'), 'lm_head.weight');
  t.equal(ggufToHfName('rope_freqs.weight'), undefined);
  // reference: w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2).reshape(rows, cols), rows labelled by index
  const nHead = 2, hd = 4;
  const rows = Uint8Array.from({ length: nHead * hd }, (_, i) => i);
  t.same(Array.from(permuteRows(rows, nHead, 1, true)), [0, 2, 1, 3, 4, 6, 5, 7]);
  t.same(Array.from(permuteRows(permuteRows(rows, nHead, 1, true), nHead, 1, false)), Array.from(rows));
});

t.test('HF → GGUF → HF gives identical tensors and config (tinystories, llama3-rope, qwen2)', async (t) => {
  for (const dir of [join(shared, 'models/tinystories-656k'), join(shared, 'goldens/llama3-rope-tiny'), join(shared, 'goldens/qwen2-tiny')]) {
    const out = join(tmp, 'm.gguf');
    convertHfToGguf(dir, out);
    const hf = SafetensorsCheckpoint.open(dir);
    const gg = loadGgufCheckpoint(out);
    const cfg = loadDecoderConfig(dir);
    const c = gg.config;
    t.same(
      [c.modelType === cfg.modelType || (cfg.modelType === 'mistral' && c.modelType === 'llama'), c.hiddenSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.intermediateSize, c.vocabSize, c.ropeScaling, c.tieWordEmbeddings, c.attentionBias, c.bosTokenId, c.eosTokenIds],
      [true, cfg.hiddenSize, cfg.numLayers, cfg.numHeads, cfg.numKvHeads, cfg.headDim, cfg.intermediateSize, cfg.vocabSize, cfg.ropeScaling, cfg.tieWordEmbeddings, cfg.attentionBias, cfg.bosTokenId, cfg.eosTokenIds],
      `config ${dir}`,
    );
    t.ok(Math.abs(c.ropeTheta - cfg.ropeTheta) / cfg.ropeTheta < 1e-6);
    let compared = 0;
    for (const name of hf.names()) {
      if (cfg.tieWordEmbeddings && name === 'lm_head.weight') continue;
      const g = gg.tensors.get(name);
      t.ok(g, `${name} present`);
      if (!g) continue;
      t.same(Buffer.from(g.bytes), Buffer.from(hf.get(name).bytes), `${name} identical bytes`) || t.bailout?.();
      compared++;
    }
    t.ok(compared >= 9);
    const md = gg.file.metadataObject();
    t.equal(md['tokenizer.ggml.model'], 'llama');
    t.equal((md['tokenizer.ggml.tokens'] as string[]).length, 2048);
  }
});

t.test('Q8_0 and F16 conversion output', async (t) => {
  const out = join(tmp, 'q8.gguf');
  convertHfToGguf(join(shared, 'goldens/llama-tiny'), out, { outType: 'Q8_0' });
  const gg = loadGgufCheckpoint(out);
  const hf = SafetensorsCheckpoint.open(join(shared, 'goldens/llama-tiny'));
  const name = 'model.layers.0.self_attn.q_proj.weight';
  const q = dequantize(gg.tensors.get(name)!), ref = hf.float32(name);
  let maxRel = 0, amax = 0;
  for (let i = 0; i < ref.length; i++) { maxRel = Math.max(maxRel, Math.abs(q[i] - ref[i])); amax = Math.max(amax, Math.abs(ref[i])); }
  t.ok(maxRel <= amax / 127 + 1e-6, `Q8_0 un-permuted rows match (max err ${maxRel})`);
  t.equal(gg.tensors.get('model.norm.weight')!.type, GgmlType.F32, 'norms stay F32');
});

t.test('bad files give clear errors', async (t) => {
  const p = join(tmp, 'bad.gguf');
  writeFileSync(p, Buffer.from('NOPE0000000000000000'));
  t.throws(() => new GgufFile(p), /bad magic/);
  const q = join(tmp, 'trunc.gguf');
  const b = Buffer.alloc(24);
  b.writeUInt32LE(0x46554747, 0); b.writeUInt32LE(3, 4); b.writeBigUInt64LE(1n, 8); b.writeBigUInt64LE(5n, 16);
  writeFileSync(q, b);
  t.throws(() => new GgufFile(q), GgufError);
  void copyFileSync; void writeSafetensors;
});

t.test('llama3 RoPE scaling: rope_freqs.weight as llama.cpp expects, read back into the config', async (t) => {
  const dir = join(shared, 'goldens/llama3-rope-tiny');
  const cfg = loadDecoderConfig(dir);
  const out = join(tmp, 'l3.gguf');
  convertHfToGguf(dir, out);
  const g = new GgufFile(out);
  const rf = g.get('rope_freqs.weight');
  t.equal(rf.type, GgmlType.F32);
  t.same(rf.ne, [cfg.headDim / 2]);
  t.equal(g.meta('llama.rope.scaling.type'), undefined, 'no rope.scaling.type: llama.cpp applies rope_freqs');
  // llama.cpp: theta_i = pos · theta^(-2i/Dh) / factor_i; Loom: pos · inv_freq_i (native rope_inv_freq)
  const factors = g.float32('rope_freqs.weight');
  const ours = ropeInvFreq(cfg.headDim, cfg.ropeTheta, { type: 'llama3', factor: cfg.ropeScaling.factor, lowFreqFactor: cfg.ropeScaling.lowFreqFactor, highFreqFactor: cfg.ropeScaling.highFreqFactor, originalMaxPositionEmbeddings: cfg.ropeScaling.originalMaxPosition });
  let maxRel = 0;
  const kinds = new Set<string>();
  for (let i = 0; i < factors.length; i++) {
    const llamacpp = Math.fround(Math.fround(Math.pow(cfg.ropeTheta, (-2 * i) / cfg.headDim)) / factors[i]);
    maxRel = Math.max(maxRel, Math.abs(llamacpp - ours.data[i]) / ours.data[i]);
    kinds.add(Math.abs(factors[i] - 1) < 1e-6 ? 'high' : Math.abs(factors[i] - cfg.ropeScaling.factor) < 1e-5 ? 'low' : 'band');
  }
  t.ok(maxRel < 2e-7, `inv_freq from rope_freqs matches native rope_inv_freq (max rel err ${maxRel})`);
  t.same([...kinds].sort(), ['band', 'high', 'low'], 'the tiny config exercises all three bands');
  t.same(loadGgufCheckpoint(out).config.ropeScaling, cfg.ropeScaling, 'exact parameters back (loom.rope_scaling agrees with the tensor)');

  // A file from llama.cpp's converter has only the tensor: the parameters are recovered from it.
  const md: Record<string, GgufValue> = {};
  for (const [k, v] of g.metadata) if (k !== 'loom.rope_scaling') md[k] = v;
  const tensors: Record<string, { type: GgmlType; shape: number[]; data: Uint8Array }> = {};
  for (const [n, ti] of g.tensors) tensors[n] = { type: ti.type, shape: ti.shape, data: ti.bytes };
  const bare = join(tmp, 'l3-bare.gguf');
  writeGguf(bare, { metadata: md, tensors });
  const rc = loadGgufCheckpoint(bare).config;
  t.equal(rc.ropeScaling.type, 'llama3');
  t.ok(Math.abs(rc.ropeScaling.factor - cfg.ropeScaling.factor) < 1e-5);
  const back = ropeInvFreq(rc.headDim, rc.ropeTheta, { type: 'llama3', factor: rc.ropeScaling.factor, lowFreqFactor: rc.ropeScaling.lowFreqFactor, highFreqFactor: rc.ropeScaling.highFreqFactor, originalMaxPositionEmbeddings: rc.ropeScaling.originalMaxPosition });
  let maxRel2 = 0;
  for (let i = 0; i < back.data.length; i++) maxRel2 = Math.max(maxRel2, Math.abs(back.data[i] - ours.data[i]) / ours.data[i]);
  t.ok(maxRel2 < 1e-5, `recovered parameters give the same inv_freq (max rel err ${maxRel2})`);

  // the recovery on its own: the real Llama 3.1 parameters, and factors that follow no llama3 rule
  const real = { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPosition: 8192 };
  const f128 = llama3RopeFactors(128, 500000, real);
  const r = llama3ParamsFromFactors(f128, 128, 500000)!;
  t.ok(Math.abs(r.originalMaxPosition / r.lowFreqFactor - 8192) < 0.5 && Math.abs(r.originalMaxPosition / r.highFreqFactor - 2048) < 0.5, 'wavelength thresholds 8192 / 2048 recovered');
  t.equal(llama3ParamsFromFactors(new Float32Array(64).fill(1), 128, 500000), null, 'all ones: plain RoPE');
  t.throws(() => llama3ParamsFromFactors(Float32Array.from({ length: 64 }, (_, i) => 1 + (i % 3)), 128, 500000), GgufError);
});

const tokFixtures = join(import.meta.dirname, '..', 'fixtures', 'tokenizers');
/** A tiny model folder (a golden checkpoint) with a fixture tokenizer (the model vocabulary, 2048, covers it). */
function modelWithTokenizer(golden: string, fam: string): string {
  const d = mkdtempSync(join(tmpdir(), `loom-gguf-${fam}-`));
  for (const f of readdirSync(join(shared, 'goldens', golden))) if (f === 'config.json' || f === 'model.safetensors') copyFileSync(join(shared, 'goldens', golden, f), join(d, f));
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(tokFixtures, fam, f), join(d, f));
  return d;
}
const BYTE_LEVEL: [string, string, string][] = [['qwen2.5', 'qwen2-tiny', 'qwen2'], ['smollm2', 'llama-tiny', 'smollm'], ['llama3', 'llama3-rope-tiny', 'llama-bpe']];

t.test('byte-level tokenizer metadata: model gpt2, pre per family, merges, token types, add_bos', async (t) => {
  for (const [fam, golden, pre] of BYTE_LEVEL) {
    const dir = modelWithTokenizer(golden, fam);
    const out = join(dir, 'm.gguf');
    convertHfToGguf(dir, out);
    const md = new GgufFile(out).metadataObject();
    const tj = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
    const tok = Tokenizer.fromDirSync(dir);
    t.equal(md['tokenizer.ggml.model'], 'gpt2', `${fam}: gpt2`);
    t.equal(md['tokenizer.ggml.pre'], pre, `${fam}: pre ${pre}`);
    t.equal(ggufPreTokenizerName(tj), pre);
    t.equal((md['tokenizer.ggml.merges'] as string[]).length, tj.model.merges.length);
    const tokens = md['tokenizer.ggml.tokens'] as string[], types = md['tokenizer.ggml.token_type'] as number[];
    t.equal(tokens.length, 2048);
    for (const a of tj.added_tokens) {
      t.equal(tokens[a.id], a.content);
      t.equal(types[a.id], a.special ? 3 : 4, `${fam}: type of ${a.content}`);
    }
    t.equal(md['tokenizer.ggml.add_bos_token'], tok.addBosToken, `${fam}: add_bos_token ${tok.addBosToken}`);
    t.ok(typeof md['tokenizer.chat_template'] === 'string');
  }
  const mis = modelWithTokenizer('mistral-tiny', 'mistral');
  convertHfToGguf(mis, join(mis, 'm.gguf'));
  const mm = new GgufFile(join(mis, 'm.gguf')).metadataObject();
  t.equal(mm['tokenizer.ggml.model'], 'llama', 'Mistral (SentencePiece BPE): llama');
  t.equal((mm['tokenizer.ggml.token_type'] as number[])[mm['tokenizer.ggml.tokens'] ? (mm['tokenizer.ggml.tokens'] as string[]).indexOf('<0x41>') : 0], 6, 'byte tokens typed BYTE');
  t.equal(mm['tokenizer.ggml.add_bos_token'], true);
});

/** Words whose vocabulary token has no merge path (so only ignore_merges yields the one token). */
function unmergedWords(tokenizerJson: string): string[] {
  const tj = JSON.parse(readFileSync(tokenizerJson, 'utf8'));
  const merged = new Set<string>((tj.model.merges as string[]).map((m) => m.replace(' ', '')));
  return Object.keys(tj.model.vocab).filter((k) => k.length > 3 && k.startsWith('Ġ') && !merged.has(k)).slice(0, 8).map((k) => 'x' + k.replace('Ġ', ' '));
}

// llama.cpp (node-llama-cpp, a bench-only dependency) tokenizes a GGUF written from a byte-level fixture like
// our Tokenizer. Skipped when bench/node_modules is not installed (`npm install --prefix bench`).
const nlcPath = join(import.meta.dirname, '..', '..', 'bench', 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
// one llama.cpp instance, one thread: the tiny models need no more, and llama.cpp's spinning thread pool is
// slow on a shared 2-core machine
let llamaP: Promise<any> | undefined;
const getLlama = async () => (llamaP ??= import(nlcPath).then((lib) => lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: 1 })));
t.teardown(async () => { if (llamaP) await (await llamaP).dispose(); });
t.test('llama.cpp tokenizes our byte-level GGUFs like Loom', { skip: existsSync(nlcPath) ? false : 'node-llama-cpp not installed (npm install --prefix bench)' }, async (t) => {
  const llama = await getLlama();
  const texts = ['Hello world', ' Hello  world ', "I'm sure they'll say it's fine, DON'T you?", '12345 3.14159 1,000,000', 'Family: 👨‍👩‍👧‍👦 🇫🇷 👍🏽',
    '東京は日本の首都です。', 'مرحبا بالعالم', 'def f(x):\n\treturn x ** 2\n', '   \n\n\t  x', 'the information Information', 'a\u00a0b\u2003c\r\n\r\nend', '🙂🙂 x'];
  for (const [fam, golden] of BYTE_LEVEL) {
    const dir = modelWithTokenizer(golden, fam);
    const out = join(dir, 'm.gguf');
    convertHfToGguf(dir, out, { outType: 'F32' });
    const tok = Tokenizer.fromDirSync(dir);
    const model = await llama.loadModel({ modelPath: out, gpuLayers: 0 });
    try {
      const extra = fam === 'llama3' ? unmergedWords(join(dir, 'tokenizer.json')) : [];
      if (fam === 'llama3') t.ok(extra.length >= 5, 'ignore_merges words present');
      for (const text of [...texts, ...extra]) t.same(Array.from(model.tokenize(text) as number[]), tok.encode(text, { addSpecialTokens: false }), `${fam}: ${JSON.stringify(text)}`);
      const chat = tok.bosToken && fam === 'llama3' ? '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>' : '<|im_start|>user\nHi<|im_end|>\n';
      t.same(Array.from(model.tokenize(chat, true) as number[]), tok.encode(chat, { addSpecialTokens: false }), `${fam}: special tokens in text`);
    } finally {
      await model.dispose();
    }
  }
});

t.test('llama.cpp with our rope_freqs.weight reproduces the llama3-rope golden greedy continuations', { skip: existsSync(nlcPath) ? false : 'node-llama-cpp not installed (npm install --prefix bench)' }, async (t) => {
  const dir = join(shared, 'goldens/llama3-rope-tiny');
  const cases = JSON.parse(readFileSync(join(dir, 'cases.json'), 'utf8')) as { prompts: { name: string; input_ids: number[]; greedy: { max_new_tokens: number; new_ids: number[] } }[] };
  const out = join(tmp, 'l3-f32.gguf');
  convertHfToGguf(dir, out, { outType: 'F32' });
  const llama = await getLlama();
  const model = await llama.loadModel({ modelPath: out, gpuLayers: 0 });
  const ctx = await model.createContext({ contextSize: 128, threads: 1 });
  try {
    for (const c of cases.prompts) {
      const seq = ctx.getSequence();
      const got: number[] = [];
      for await (const tk of seq.evaluate(c.input_ids, { temperature: 0 })) {
        got.push(tk as number);
        if (got.length >= c.greedy.max_new_tokens) break;
      }
      seq.dispose();
      t.same(got, c.greedy.new_ids, `${c.name}: llama.cpp greedy = transformers greedy`);
    }
  } finally {
    await ctx.dispose();
    await model.dispose();
  }
});
