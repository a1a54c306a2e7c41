import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SafetensorsCheckpoint, SafetensorsFile, serializeSafetensors, toIntArray } from '../../src/formats/safetensors.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');

t.test('reads a real checkpoint and a golden file', async (t) => {
  const ck = SafetensorsCheckpoint.open(join(shared, 'models/tinystories-656k'));
  t.ok(ck.names().length > 5);
  const ex = new SafetensorsFile(join(shared, 'goldens/llama-tiny/expected.safetensors'));
  const logits = ex.float32('prompt1.logits');
  t.equal(logits.length, 6 * 2048);
  t.ok(Number.isFinite(logits[0]));
  const bf = SafetensorsCheckpoint.open(join(shared, 'goldens/llama-tiny/model.bf16.safetensors'));
  const f32 = SafetensorsCheckpoint.open(join(shared, 'goldens/llama-tiny'));
  const name = f32.names()[0];
  const a = f32.float32(name), b = bf.float32(name);
  let maxRel = 0;
  for (let i = 0; i < a.length; i++) maxRel = Math.max(maxRel, Math.abs(a[i] - b[i]) / (Math.abs(a[i]) + 1e-30));
  t.ok(maxRel <= 2 ** -8, `bf16 widening within rounding (${maxRel})`);
});

t.test('round-trips written tensors', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'loom-st-'));
  const p = join(dir, 'x.safetensors');
  writeFileSync(p, serializeSafetensors({
    w: { dtype: 'F32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
    ids: { dtype: 'I64', shape: [2], data: new BigInt64Array([7n, -100n]) },
  }, { format: 'pt' }));
  const f = new SafetensorsFile(p);
  t.same(Array.from(f.float32('w')), [1, 2, 3, 4, 5, 6]);
  t.same(toIntArray(f.get('ids')), [7, -100]);
  t.same(f.metadata, { format: 'pt' });
  t.throws(() => f.get('nope'), /not found/);
});

t.test('rejects corrupt files with a clear error', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'loom-st-'));
  const p = join(dir, 'bad.safetensors');
  const b = Buffer.alloc(16);
  b.writeBigUInt64LE(1000n, 0);
  writeFileSync(p, b);
  t.throws(() => new SafetensorsFile(p), /exceeds the file/);
  t.throws(() => new SafetensorsFile(join(dir, 'missing.safetensors')), /cannot open/);
});
