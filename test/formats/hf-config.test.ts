import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadDecoderConfig, loadGenerationConfig, parseDecoderConfig } from '../../src/formats/hf-config.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');
const g = (n: string): string => join(shared, 'goldens', n);

t.test('4.x and 5.x layouts normalize identically', async (t) => {
  for (const name of ['llama-tiny', 'qwen2-tiny', 'mistral-tiny', 'llama3-rope-tiny']) {
    const a = loadDecoderConfig(g(name));
    const b = loadDecoderConfig(join(g(name), 'config.transformers5.json'));
    t.same(b, a, name);
  }
});

t.test('architecture details', async (t) => {
  const l3 = loadDecoderConfig(g('llama3-rope-tiny'));
  t.same(l3.ropeScaling, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPosition: 64 });
  t.equal(l3.ropeTheta, 500000);
  t.equal(l3.numKvHeads, 2);
  t.equal(l3.headDim, 16);
  const q = loadDecoderConfig(g('qwen2-tiny'));
  t.equal(q.modelType, 'qwen2');
  t.equal(q.attentionBias, true);
  t.equal(q.tieWordEmbeddings, true);
  t.equal(q.ropeTheta, 1e6);
  t.equal(q.slidingWindow, null);
  const m = loadDecoderConfig(g('mistral-tiny'));
  t.equal(m.modelType, 'mistral');
  t.equal(m.numHeads, 6);
  t.equal(m.headDim, 16);
  t.equal(m.attentionBias, false);
  t.equal(m.ropeScaling.type, 'none');
  const ts = loadDecoderConfig(join(shared, 'models/tinystories-656k'));
  t.same(
    { v: ts.vocabSize, h: ts.hiddenSize, f: ts.intermediateSize, l: ts.numLayers, nh: ts.numHeads, kv: ts.numKvHeads, hd: ts.headDim, eps: ts.rmsNormEps, tie: ts.tieWordEmbeddings, bos: ts.bosTokenId, eos: ts.eosTokenIds, pad: ts.padTokenId, dt: ts.torchDtype },
    { v: 2048, h: 128, f: 384, l: 2, nh: 8, kv: 4, hd: 16, eps: 1e-6, tie: true, bos: 1, eos: [2], pad: null, dt: 'float32' },
  );
  const mz = loadDecoderConfig(join(shared, 'models/minueza-32m-ultrachat-tokenizer'));
  t.equal(mz.slidingWindow, 1024);
  t.same(mz.eosTokenIds, [32000]);
});

t.test('generation config defaults', async (t) => {
  const gc = loadGenerationConfig(join(shared, 'models/tinystories-656k'));
  t.same(gc.eosTokenIds, [2]);
  t.equal(gc.temperature, 1);
  t.equal(gc.maxNewTokens, null);
  const dir = mkdtempSync(join(tmpdir(), 'loom-gc-'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ eos_token_id: [5, 6] }));
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ temperature: 0.7, top_p: 0.8, top_k: 20, do_sample: true, max_new_tokens: 99 }));
  const g2 = loadGenerationConfig(dir);
  t.same([g2.temperature, g2.topP, g2.topK, g2.doSample, g2.maxNewTokens, g2.eosTokenIds], [0.7, 0.8, 20, true, 99, [5, 6]]);
});

t.test('clear errors for unsupported or broken configs', async (t) => {
  const base = { model_type: 'llama', hidden_size: 64, num_attention_heads: 4, num_hidden_layers: 2, intermediate_size: 128, vocab_size: 100 };
  t.throws(() => parseDecoderConfig({ ...base, model_type: 'gpt2', architectures: ['GPT2LMHeadModel'] }), /unsupported model_type "gpt2" \(GPT2LMHeadModel\)/);
  t.throws(() => parseDecoderConfig({ ...base, hidden_size: 'x' }), /hidden_size/);
  t.throws(() => parseDecoderConfig({ ...base, num_key_value_heads: 3 }), /multiple/);
  t.throws(() => parseDecoderConfig({ ...base, rope_scaling: { rope_type: 'yarn', factor: 4 } }), /yarn/);
  t.throws(() => parseDecoderConfig({ ...base, hidden_act: 'gelu' }), /gelu/);
  t.throws(() => loadDecoderConfig('/nonexistent-dir'), ConfigError);
  const c = parseDecoderConfig({ ...base, rope_scaling: { type: 'linear', factor: 2 } });
  t.equal(c.ropeScaling.type, 'linear');
  t.equal(c.ropeScaling.factor, 2);
  t.equal(c.numKvHeads, 4);
  t.equal(c.headDim, 16);
});
