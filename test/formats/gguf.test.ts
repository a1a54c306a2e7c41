import t from 'tap';
import { mkdtempSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SafetensorsCheckpoint, writeSafetensors } from '../../src/formats/safetensors.ts';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import {
  convertHfToGguf, dequantize, f32ToF16, GgmlType, GgufError, GgufFile, ggufToHfName, gv, hfToGgufName,
  loadGgufCheckpoint, permuteRows, quantizeQ8_0, writeGguf,
} from '../../src/formats/gguf.ts';

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
