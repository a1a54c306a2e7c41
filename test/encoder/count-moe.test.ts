// count_lstm_moe (GLiNER2 CountLSTMoE): GRU over the count steps, then a softmax-gated mixture of
// GELU experts. Checked against a PyTorch computation (test/fixtures/gliner2-moe/make.py: torch.nn.GRU,
// einsum experts) on the tiny golden checkpoint's GRU/count head with random MoE weights; then a
// checkpoint with that layer loads and extracts end to end, and malformed MoE tensors are refused.
import t from 'tap';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addon } from '../../src/native/addon.ts';
import { SafetensorsCheckpoint, toFloat32, writeSafetensors, type TensorToWrite } from '../../src/formats/safetensors.ts';
import { loadEncoder } from '../../src/models/encoder/index.ts';

const golden = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
const fixture = SafetensorsCheckpoint.open(join(import.meta.dirname, '../fixtures/gliner2-moe/moe.safetensors'));
const base = SafetensorsCheckpoint.open(golden);
const moeNames = fixture.names().filter((n) => n.startsWith('count_embed.'));
const f32 = (ck: SafetensorsCheckpoint, n: string) => toFloat32(ck.get(n));

t.test('count embedding equals the PyTorch reference', async (t) => {
  const D = 96;
  const heads: Record<string, Float32Array> = {};
  for (const n of base.names()) if (!n.startsWith('encoder.') && !n.startsWith('count_embed.transformer.')) heads[n] = f32(base, n);
  for (const n of moeNames) heads[n] = f32(fixture, n);
  const [E, , I] = fixture.get('count_embed.w1').shape;
  const h = await addon.gliner2HeadsCreate(D, 8, 'count_lstm_moe', heads, E, I);
  const embs = f32(fixture, 'inputs.embs'); // (1+M, D)
  const M = embs.length / D - 1;
  const W = 5;
  const words = Float32Array.from({ length: W * D }, (_, i) => Math.sin(i * 0.37));
  const res = await addon.gliner2HeadsRun(h, words, Int32Array.of(0, W), Int32Array.of(0), Int32Array.of(0), Int32Array.of(M), embs, true);
  const count = f32(fixture, 'inputs.count')[0];
  t.equal(res.counts[0], count, `predicted count ${count}`);
  const want = f32(fixture, 'expected.count_embed');
  const got = res.countEmbed[0] as Float32Array;
  t.equal(got.length, want.length, '(count, M, D)');
  let maxErr = 0;
  let maxAbs = 0;
  for (let i = 0; i < want.length; i++) {
    maxErr = Math.max(maxErr, Math.abs(got[i] - want[i]));
    maxAbs = Math.max(maxAbs, Math.abs(want[i]));
  }
  t.ok(maxAbs > 0.05, `non-trivial output (max |x| ${maxAbs})`);
  t.ok(maxErr < 1e-4, `max abs error ${maxErr}`);
  const gates = f32(fixture, 'expected.gates');
  t.ok(gates.some((g) => g > 0.2 && g < 0.8), 'the fixture mixes experts (not only one-hot gates)');
});

function moeCheckpoint(mutate?: (tensors: Record<string, TensorToWrite>) => void): string {
  const dir = mkdtempSync(join(tmpdir(), 'loom-moe-'));
  cpSync(golden, dir, { recursive: true });
  const tensors: Record<string, TensorToWrite> = {};
  for (const n of base.names()) {
    if (n.startsWith('count_embed.transformer.')) continue;
    const t = base.get(n);
    tensors[n] = { dtype: 'F32', shape: t.shape, data: f32(base, n) };
  }
  for (const n of moeNames) tensors[n] = { dtype: 'F32', shape: fixture.get(n).shape, data: f32(fixture, n) };
  mutate?.(tensors);
  rmSync(join(dir, 'model.safetensors'));
  writeSafetensors(join(dir, 'model.safetensors'), tensors);
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  cfg.counting_layer = 'count_lstm_moe';
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}

t.test('a count_lstm_moe checkpoint loads and extracts', async (t) => {
  const dir = moeCheckpoint();
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const m = await loadEncoder(dir);
  t.equal(m.info.countingLayer, 'count_lstm_moe');
  const text = 'Angela Merkel visited the Siemens plant in Munich on Monday.';
  const r = await m.extract(text, { entities: ['person', 'location'], structures: { visit: ['who::str', 'where::str'] } }, { threshold: 0.05 });
  t.same(Object.keys(r), ['entities', 'structures']);
  for (const list of Object.values(r.entities!))
    for (const e of list as { text: string; start: number; end: number }[]) t.equal(text.slice(e.start, e.end), e.text);
  const { inter } = await m.debugRun(text, ['person', 'location']);
  const seg = inter.segments[0];
  t.equal(seg.countEmbed!.length, seg.count * 2 * 96, 'count embedding (count, M, D)');

  const bad = moeCheckpoint((ts) => {
    ts['count_embed.b2'] = { dtype: 'F32', shape: [3, 96], data: new Float32Array(3 * 96) };
  });
  t.teardown(() => rmSync(bad, { recursive: true, force: true }));
  await t.rejects(loadEncoder(bad), /count_lstm_moe tensor count_embed\.b2 has shape \[3,96\], expected \[2,96\]/);
});
