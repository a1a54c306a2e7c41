// ggml block types (Q4_0 ... Q6_K, Q8_K): Loom's native dequantization against llama.cpp's gguf-py.
// Fixtures: test/fixtures/gguf-quants (make.py regenerates them: quantized blocks from gguf-py's quantizer
// where it has one, random blocks covering every bit pattern, and gguf-py's float32 dequantization).
// The comparison is bit-exact: each value is one or two float32 operations on exactly converted f16 / int
// inputs (d·q, d·q + m, (d·sc)·q - dmin·mn), done in the same order as gguf-py's numpy code, so there is
// no rounding freedom to allow for (FMA contraction is off in gguf_dequant.cc).
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addon } from '../../src/native/addon.ts';
import { getThreads, setThreads } from '../../src/native/cpu.ts';
import {
  DEQUANTIZABLE_TYPES, dequantize, dequantizeAsync, GgmlType, GgufError, GgufFile, type GgufTensorInfo,
} from '../../src/formats/gguf.ts';
import { writeGguf } from '../../src/formats/gguf-writer.ts';
import { ggufTensorSource } from '../../src/models/decoder/gguf-source.ts';
import { quantizeQ4K, quantizeQ6K } from './ggml-quantize.ts';

const dir = join(import.meta.dirname, '..', 'fixtures', 'gguf-quants');
interface Entry { type: number; block_values: number; block_bytes: number; blocks: number; from_input_values: number; random_values: number }
const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { types: Record<string, Entry>; input: { rows: number; cols: number } };
const bytesOf = (f: string) => { const b = readFileSync(join(dir, f)); return new Uint8Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)); };
const input = new Float32Array(bytesOf('input.f32').buffer);

function info(name: string, type: GgmlType, bytes: Uint8Array, n: number): GgufTensorInfo {
  return { name, type, ne: [n], shape: [n], offset: 0, bytes };
}
function firstDiff(a: Float32Array, b: Float32Array): number {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length), ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  if (ua.length !== ub.length) return 0;
  for (let i = 0; i < ua.length; i++) if (ua[i] !== ub[i]) return i;
  return -1;
}

t.test('the native dequantizer handles exactly the listed types, all covered by fixtures', async (t) => {
  t.same([...addon.ggmlDequantTypes()].sort((a: number, b: number) => a - b), [...DEQUANTIZABLE_TYPES].sort((a, b) => a - b));
  t.same(Object.values(manifest.types).map((e) => e.type).sort((a, b) => a - b), [...DEQUANTIZABLE_TYPES].sort((a, b) => a - b));
});

for (const [name, e] of Object.entries(manifest.types)) {
  t.test(`${name}: bit-exact with gguf-py`, async (t) => {
    const q = bytesOf(`${name}.q`), expected = new Float32Array(bytesOf(`${name}.f32`).buffer);
    t.equal(q.length, e.blocks * e.block_bytes);
    t.equal(expected.length, e.blocks * e.block_values);
    const got = dequantize(info(name, e.type, q, expected.length));
    const i = firstDiff(got, expected);
    t.equal(i, -1, i < 0 ? `${expected.length} values identical` : `value ${i}: ${got[i]} vs ${expected[i]}`);
    const gotAsync = await dequantizeAsync(info(name, e.type, q, expected.length));
    t.equal(firstDiff(gotAsync, expected), -1, 'async path identical');
    if (e.from_input_values) {
      // the part quantized from input.f32 by gguf-py approximates it (checks the fixture is what it says)
      let err = 0, amax = 0;
      for (let k = 0; k < e.from_input_values; k++) { err = Math.max(err, Math.abs(got[k] - input[k])); amax = Math.max(amax, Math.abs(input[k])); }
      t.ok(err <= amax / 7, `gguf-py quantized rows within ${err.toExponential(2)} of the input (max |x| ${amax.toFixed(1)})`);
    }
  });
}

t.test('large tensors: split across the thread pool, same values on 1 and 2 threads', async (t) => {
  const q = bytesOf('Q4_K.q'), expected = new Float32Array(bytesOf('Q4_K.f32').buffer);
  const reps = 97; // 97 × 8 blocks: several pool chunks of unequal size
  const big = new Uint8Array(q.length * reps), want = new Float32Array(expected.length * reps);
  for (let r = 0; r < reps; r++) { big.set(q, r * q.length); want.set(expected, r * expected.length); }
  const before = getThreads();
  try {
    for (const n of [1, 2]) {
      setThreads(n);
      t.equal(firstDiff(dequantize(info('big', GgmlType.Q4_K, big, want.length)), want), -1, `${n} thread(s)`);
      t.equal(firstDiff(await dequantizeAsync(info('big', GgmlType.Q4_K, big, want.length)), want), -1, `${n} thread(s), async`);
    }
  } finally {
    setThreads(before);
  }
});

t.test('the test quantizers (Q4_K, Q6_K) round-trip through the native dequantizer', async (t) => {
  // input.f32 rows: weights ~N(0, 0.02) with outliers, zeros, mixed magnitudes. Bounds: half a quantization
  // step of the largest sub-block in each 256-value block, with the 6-bit scale rounding on top.
  for (const [type, quant, steps] of [[GgmlType.Q4_K, quantizeQ4K, 15], [GgmlType.Q6_K, quantizeQ6K, 62]] as const) {
    const q = quant(input);
    const back = dequantize(info('x', type, q, input.length));
    let worst = 0;
    for (let b = 0; b < input.length / 256; b++) {
      let lo = 0, hi = 0, err = 0;
      for (let i = b * 256; i < (b + 1) * 256; i++) { lo = Math.min(lo, input[i]); hi = Math.max(hi, input[i]); err = Math.max(err, Math.abs(back[i] - input[i])); }
      const step = (hi - lo) / steps;
      worst = Math.max(worst, step ? err / step : err);
    }
    t.ok(worst <= 1.5, `${GgmlType[type]}: max error ${worst.toFixed(2)} steps`);
  }
});

t.test('bad input: unsupported types name the tensor, the type and the supported list', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-gguf-q-'));
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
  // a file with IQ4_NL / IQ2_XS tensors opens (their sizes are known); only dequantizing them fails
  const p = join(tmp, 'iq.gguf');
  writeGguf(p, {
    metadata: { 'general.architecture': 'llama' },
    tensors: {
      'blk.0.attn_q.weight': { type: GgmlType.IQ4_NL, shape: [2, 32], data: new Uint8Array(2 * 18) },
      'blk.0.attn_k.weight': { type: GgmlType.IQ2_XS, shape: [1, 256], data: new Uint8Array(74) },
      'blk.0.attn_v.weight': { type: GgmlType.Q4_K, shape: [1, 256], data: new Uint8Array(144) },
    },
  });
  const g = new GgufFile(p);
  t.equal(g.get('blk.0.attn_q.weight').bytes.length, 36);
  t.throws(() => g.float32('blk.0.attn_q.weight'), new GgufError('tensor blk.0.attn_q.weight: ggml type IQ4_NL is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)'));
  await t.rejects(dequantizeAsync(g.get('blk.0.attn_k.weight')), /tensor blk\.0\.attn_k\.weight: ggml type IQ2_XS is not supported/);
  t.same(Array.from(g.float32('blk.0.attn_v.weight')), new Array(256).fill(0), 'zero Q4_K block');
  // the decoder's tensor source refuses the file up front, naming every offending tensor
  t.throws(() => ggufTensorSource(new Map([...g.tensors]), false), /ggml type IQ4_NL is not supported .*; 1 more: blk\.0\.attn_k\.weight \(IQ2_XS\)/);
  // native argument checks
  t.throws(() => addon.ggmlDequantize(GgmlType.Q4_K, new Uint8Array(143), new Float32Array(256)), /src has 143 bytes, 256 values need 144/);
  t.throws(() => addon.ggmlDequantize(GgmlType.Q4_K, new Uint8Array(144), new Float32Array(200)), /not a multiple of the block size 256/);
  t.throws(() => addon.ggmlDequantize(GgmlType.IQ4_NL, new Uint8Array(18), new Float32Array(32)), /ggml type 20 has no dequantizer/);
  t.throws(() => addon.ggmlDequantizeAsync(GgmlType.Q6_K, new Uint8Array(211), 256), /src has 211 bytes, 256 values need 210/);
  // a type id ggml does not define cannot be sized: the file does not open
  const u = join(tmp, 'unknown.gguf');
  const buf = Buffer.from(readFileSync(p));
  const at = buf.indexOf(Buffer.from('blk.0.attn_q.weight')) + 'blk.0.attn_q.weight'.length + 4 + 16; // name, n_dims, ne[2]
  buf.writeUInt32LE(99, at);
  (await import('node:fs')).writeFileSync(u, buf);
  t.throws(() => new GgufFile(u), /tensor blk\.0\.attn_q\.weight: unknown ggml type 99/);
});
