// DeBERTa forward: packed batches (right padding dropped) and key-masked rows (left padding, holes)
// agree with single unpadded runs, on every ISA. Relative positions depend only on i − j, so a
// left-padded sample's real tokens see exactly what they see unpadded.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsCheckpoint } from '../../src/formats/safetensors.ts';
import { DebertaEncoder, parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { forEachIsa } from '../../src/native/cpu.ts';

const dir = join(import.meta.dirname, '../../../shared/goldens/deberta-v2-tiny');
const ckpt = SafetensorsCheckpoint.open(dir);
const config = parseDebertaConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')));
const D = config.hiddenSize;

function seq(n: number, seed: number): number[] {
  return Array.from({ length: n }, (_, i) => 4 + ((i * 7919 + seed * 104729) % 990));
}
function maxDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

t.test('packed and masked batches equal single runs', async (t) => {
  const enc = await DebertaEncoder.load(ckpt, config);
  await forEachIsa(async (isa) => {
    const lens = [3, 40, 17, 1, 150];
    const seqs = lens.map((n, i) => seq(n, i + 1));
    const single = await Promise.all(seqs.map((s) => enc.forward(Int32Array.from(s), new Uint8Array(s.length).fill(1), 1, s.length)));
    const N = Math.max(...lens) + 5;
    const B = lens.length;
    // right padding (packed, padding never computed)
    const ids = new Int32Array(B * N);
    const mask = new Uint8Array(B * N);
    seqs.forEach((s, b) => (ids.set(s, b * N), mask.fill(1, b * N, b * N + s.length)));
    const out = await enc.forward(ids, mask, B, N);
    // left padding (keys masked inside the kernel)
    const idsL = new Int32Array(B * N);
    const maskL = new Uint8Array(B * N);
    seqs.forEach((s, b) => (idsL.set(s, b * N + N - s.length), maskL.fill(1, b * N + N - s.length, (b + 1) * N)));
    const outL = await enc.forward(idsL, maskL, B, N);
    seqs.forEach((s, b) => {
      const n = s.length;
      const right = out.subarray(b * N * D, (b * N + n) * D);
      const left = outL.subarray((b * N + N - n) * D, (b + 1) * N * D);
      t.ok(maxDiff(right, single[b]) < 2e-5, `${isa} right-padded sample ${b} (n=${n})`);
      t.ok(maxDiff(left, single[b]) < 2e-5, `${isa} left-padded sample ${b} (n=${n})`);
      t.ok(out.subarray((b * N + n) * D, (b + 1) * N * D).every((v) => v === 0), `${isa} padding rows are zero`);
      t.ok(outL.subarray(b * N * D, (b * N + N - n) * D).every((v) => v === 0), `${isa} left padding rows are zero`);
    });
    // a hole in the middle: the real tokens run as one sequence with the hole's keys masked;
    // the all-masked sample gives zeros
    const n = 30;
    const s = seq(n, 9);
    const m = new Uint8Array(n).fill(1);
    m.fill(0, 10, 14);
    const holes = await enc.forward(Int32Array.from(s), m, 1, n);
    t.ok(holes.every((v) => Number.isFinite(v)), `${isa} holes: finite`);
    t.ok(holes.subarray(10 * D, 14 * D).every((v) => v === 0), `${isa} holes: masked rows are zero`);
    const none = await enc.forward(Int32Array.from(s), new Uint8Array(n), 1, n);
    t.ok(none.every((v) => v === 0), `${isa} fully masked sample is zero`);
  });
});
