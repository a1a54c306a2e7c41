import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Sampler, SamplingError } from '../../src/runtime/sampling.ts';
import { argmaxF32 } from '../../src/native/ops.ts';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');

function bits(V: number, ids: number[]): Uint32Array {
  const b = new Uint32Array(Math.ceil(V / 32));
  for (const i of ids) b[i >>> 5] |= 1 << (i & 31);
  return b;
}

t.test('greedy: argmax, lowest id on ties, constraint mask', async (t) => {
  const s = new Sampler({ temperature: 0 }, 6);
  t.equal(s.sample(new Float32Array([1, 5, 2, 5, 0, -1]), []).token, 1);
  t.equal(s.sample(new Float32Array([1, 5, 2, 5, 0, -1]), [], bits(6, [2, 3])).token, 3);
  t.equal(s.sample(new Float32Array([1, 5, 2, 5, 0, 9]), [], bits(6, [0, 4])).token, 0);
  t.throws(() => s.sample(new Float32Array(6), [], bits(6, [])), SamplingError);
});

t.test('logprobs equal the golden top-5 of tinystories (log_softmax of the last position)', async (t) => {
  const cases = JSON.parse(readFileSync(join(shared, 'goldens/tinystories-656k/cases.json'), 'utf8'));
  const ex = new SafetensorsFile(join(shared, 'goldens/tinystories-656k/expected.safetensors'));
  for (const p of cases.prompts) {
    const all = ex.float32(p.logits_key);
    const V = 2048;
    const last = all.slice(all.length - V);
    const s = new Sampler({ temperature: 0, logprobs: true, top_logprobs: 5 }, V);
    const r = s.sample(last, []);
    t.same(r.top!.map((x) => x.token), p.top5_next_token.map((x: { id: number }) => x.id), `top5 ids ${p.name}`);
    const maxErr = Math.max(...r.top!.map((x, i) => Math.abs(x.logprob - p.top5_next_token[i].logprob)));
    t.ok(maxErr <= 1e-4, `top5 logprobs within 1e-4 (${maxErr})`);
    t.equal(r.token, p.top5_next_token[0].id);
  }
});

t.test('same seed gives the same tokens; different seeds differ', async (t) => {
  const V = 5000;
  const logits = new Float32Array(V);
  for (let i = 0; i < V; i++) logits[i] = Math.sin(i * 12.9898) * 4;
  const seq = (seed: number, extra = {}): number[] => {
    const s = new Sampler({ temperature: 0.9, top_p: 0.95, seed, ...extra }, V);
    const h: number[] = [];
    for (let i = 0; i < 30; i++) h.push(s.sample(logits, h).token);
    return h;
  };
  t.same(seq(42), seq(42));
  t.notSame(seq(42), seq(43));
  t.same(seq(7, { top_k: 40 }), seq(7, { top_k: 40 }));
});

t.test('sampling frequencies follow the distribution (fixed seed)', async (t) => {
  const logits = new Float32Array([Math.log(0.5), Math.log(0.3), Math.log(0.2)]);
  const s = new Sampler({ temperature: 1, seed: 1 }, 3);
  const c = [0, 0, 0];
  const N = 20000;
  for (let i = 0; i < N; i++) c[s.sample(logits, []).token]++;
  t.ok(Math.abs(c[0] / N - 0.5) < 0.02 && Math.abs(c[1] / N - 0.3) < 0.02 && Math.abs(c[2] / N - 0.2) < 0.02, `freqs ${c}`);
  // temperature sharpens: at T=0.5 probabilities ∝ p^2 → 25/38, 9/38, 4/38
  const s2 = new Sampler({ temperature: 0.5, seed: 2 }, 3);
  const c2 = [0, 0, 0];
  for (let i = 0; i < N; i++) c2[s2.sample(logits, []).token]++;
  t.ok(Math.abs(c2[0] / N - 25 / 38) < 0.02 && Math.abs(c2[2] / N - 4 / 38) < 0.02, `T=0.5 freqs ${c2}`);
});

t.test('top-k, top-p and min-p restrict the candidate set', async (t) => {
  const V = 10000;
  const logits = new Float32Array(V).fill(-5);
  // probabilities dominated by ids 100 (0.6), 200 (0.25), 300 (0.1), then a long tail
  logits[100] = 6; logits[200] = 6 + Math.log(0.25 / 0.6); logits[300] = 6 + Math.log(0.1 / 0.6);
  const seen = (params: object): Set<number> => {
    const s = new Sampler({ seed: 3, ...params }, V);
    const out = new Set<number>();
    for (let i = 0; i < 3000; i++) out.add(s.sample(logits, []).token);
    return out;
  };
  t.same([...seen({ top_k: 2 })].sort((a, b) => a - b), [100, 200]);
  t.same([...seen({ top_p: 0.7 })].sort((a, b) => a - b), [100, 200]);
  t.same([...seen({ top_p: 0.5 })], [100]);
  t.same([...seen({ min_p: 0.3 })].sort((a, b) => a - b), [100, 200]);
  t.ok(seen({}).size > 3, 'no truncation samples the tail too');
  // logprob reports the untruncated distribution
  const r = new Sampler({ seed: 1, top_k: 1, logprobs: true }, V).sample(logits, []);
  t.equal(r.token, 100);
  t.ok(r.logprob < -0.1 && r.logprob > -1);
});

t.test('penalties: OpenAI frequency/presence over generated, HF repetition over prompt+generated', async (t) => {
  const logits = new Float32Array([2, 1, -1, 0.5]);
  const lp = (params: object, hist: number[], prompt: number[] = []): number[] => {
    const s = new Sampler({ temperature: 1, top_logprobs: 4, ...params }, 4);
    s.setPrompt(prompt);
    const r = s.sample(logits, hist);
    const out = [0, 0, 0, 0];
    for (const x of r.top!) out[x.token] = x.logprob;
    return out;
  };
  const lsm = (x: number[]): number[] => {
    const m = Math.max(...x);
    const z = Math.log(x.reduce((a, v) => a + Math.exp(v - m), 0)) + m;
    return x.map((v) => v - z);
  };
  const close = (a: number[], b: number[]): boolean => a.every((v, i) => Math.abs(v - b[i]) < 1e-5);
  t.ok(close(lp({ frequency_penalty: 0.5, presence_penalty: 0.25 }, [0, 0, 2]), lsm([2 - 1 - 0.25, 1, -1 - 0.5 - 0.25, 0.5])));
  t.ok(close(lp({ repetition_penalty: 2 }, [2], [0]), lsm([1, 1, -2, 0.5])));
  t.ok(close(lp({ frequency_penalty: 1 }, [], [0]), lsm([2, 1, -1, 0.5])), 'frequency penalty ignores the prompt');
});

t.test('parameter validation', async (t) => {
  t.throws(() => new Sampler({ temperature: -1 }, 10), /temperature/);
  t.throws(() => new Sampler({ top_p: 0 }, 10), /top_p/);
  t.throws(() => new Sampler({ top_k: 1.5 }, 10), /top_k/);
  t.throws(() => new Sampler({ top_logprobs: 21 }, 10), /top_logprobs/);
});

t.test("the step's argmax stands in for the sampler's own only where nothing edits the logits", async (t) => {
  const V = 1000;
  const logits = Float32Array.from({ length: V }, (_, i) => Math.sin(i * 0.37) * 4);
  const best = argmaxF32(logits);
  for (const params of [{ temperature: 0 }, { temperature: 0.8, seed: 5, logprobs: true }]) {
    const r0 = new Sampler(params, V).sample(logits, []);
    const r1 = new Sampler(params, V).sample(logits, [], null, best);
    t.same(r1, r0, JSON.stringify(params));
  }
  // a penalty or a constraint changes the logits: the given argmax (of the raw logits) is not used
  const pen = new Sampler({ temperature: 0, presence_penalty: 100 }, V);
  t.not(pen.sample(logits, [best], null, best).token, best);
  const allowed = new Uint32Array(Math.ceil(V / 32)).fill(0xffffffff);
  allowed[best >> 5] &= ~(1 << (best & 31));
  t.not(new Sampler({ temperature: 0 }, V).sample(logits, [], allowed, best).token, best);
});
