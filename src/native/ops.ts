// Typed wrappers over the native ops (native/include/loom/ops.h): one forward and one backward per
// op. Shapes are checked here, with errors that name the op, the argument and the expected shape;
// outputs are allocated unless given. Backward functions return fresh gradients for inputs; for
// parameters they accumulate (+=) into tensors passed in, else into fresh zeros.
// Heavy ops (attention, LoRA, cross-entropy) have *Async variants that run off the event loop.
import { addon } from './addon.ts';
import { ShapeCheck, ShapeError, Tensor, type Dtype } from './tensor.ts';


type F32 = Tensor<'f32'>;
type I32 = Tensor<'i32'>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const N: Record<string, (...args: any[]) => any> = addon.ops;

function outOr(c: ShapeCheck, name: string, out: F32 | undefined, shape: readonly number[]): F32 {
  if (out === undefined) return new Tensor('f32', shape);
  c.tensor(name, out, shape.map((d) => d));
  return out;
}
function accOr(c: ShapeCheck, name: string, acc: F32 | null | undefined, shape: readonly number[]): F32 {
  return outOr(c, name, acc ?? undefined, shape);
}
function lastDim(t: Tensor): number {
  return t.shape.length ? t.shape[t.shape.length - 1] : 1;
}
function rowsOf(t: Tensor): number {
  const D = lastDim(t);
  return D === 0 ? 0 : t.numel / D;
}

// ---------------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------------
/** y = a + b (same shapes). */
export function add(a: F32, b: F32, out?: F32): F32 {
  const c = new ShapeCheck('add');
  c.same(['a', 'b', 'out'], [a, b, out]);
  const y = out ?? new Tensor('f32', a.shape);
  N.addFwd(a.data, b.data, y.data);
  return y;
}
/** y = a * b (same shapes). */
export function mul(a: F32, b: F32, out?: F32): F32 {
  const c = new ShapeCheck('mul');
  c.same(['a', 'b', 'out'], [a, b, out]);
  const y = out ?? new Tensor('f32', a.shape);
  N.mulFwd(a.data, b.data, y.data);
  return y;
}
/** Gradients of y = a * b: da += dy·b, db += dy·a (into `acc` tensors if given, else fresh). */
export function mulBackward(a: F32, b: F32, dy: F32, acc: { da?: F32 | null; db?: F32 | null } = {}): { da: F32; db: F32 } {
  const c = new ShapeCheck('mulBackward');
  c.same(['a', 'b', 'dy', 'da', 'db'], [a, b, dy, acc.da, acc.db]);
  const da = acc.da ?? new Tensor('f32', a.shape);
  const db = acc.db ?? new Tensor('f32', b.shape);
  N.mulBwd(a.data, b.data, dy.data, da.data, db.data);
  return { da, db };
}
/** y = s * x. */
export function scale(x: F32, s: number, out?: F32): F32 {
  const c = new ShapeCheck('scale');
  c.same(['x', 'out'], [x, out]);
  const y = out ?? new Tensor('f32', x.shape);
  N.scaleFwd(x.data, s, y.data);
  return y;
}
/** y += a * x, in place on y. */
/** y (rows, cols) += a (rows, r) · b (r, cols): a LoRA's scaled x·Aᵀ times Bᵀ, b f32 or bf16 bits (Uint16Array); per
 * element the r FMAs that r axpys y[m] += a[m, k]·b[k] make, in the same order. */
export function loraBRows(rows: number, cols: number, r: number, a: Float32Array, b: Float32Array | Uint16Array,
  y: Float32Array): Float32Array {
  N.loraBRows(rows, cols, r, a, b, y);
  return y;
}
export function axpy(a: number, x: F32, y: F32): F32 {
  new ShapeCheck('axpy').same(['x', 'y'], [x, y]);
  N.axpy(a, x.data, y.data);
  return y;
}
/** x (..., D) += b (D), in place. */
export function addBias(x: F32, b: F32): F32 {
  const c = new ShapeCheck('addBias');
  c.tensor('x', x, ['...', 'D']);
  c.tensor('b', b, ['D']);
  N.addBias(rowsOf(x), lastDim(x), x.data, b.data);
  return x;
}
/** db (D) += column sums of dy (..., D). */
export function biasBackward(dy: F32, db?: F32): F32 {
  const c = new ShapeCheck('biasBackward');
  c.tensor('dy', dy, ['...', 'D']);
  const D = lastDim(dy);
  const g = accOr(c, 'db', db, [D]);
  N.biasBwd(rowsOf(dy), D, dy.data, g.data);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Embedding
// ---------------------------------------------------------------------------------------------
/** out (..., D) = table (V, D) rows at ids (...). The table may be f32, bf16 or f16. */
export function embedding(ids: I32, table: Tensor<'f32' | 'bf16' | 'f16'>, out?: F32): F32 {
  const c = new ShapeCheck('embedding');
  c.tensor('ids', ids, ['...'], 'i32');
  c.tensor('table', table, ['V', 'D'], ['f32', 'bf16', 'f16']);
  const D = c.dim('D');
  const y = outOr(c, 'out', out, [...ids.shape, D]);
  N.embeddingFwd(ids.numel, D, ids.data, table.data, table.dtype, y.data);
  return y;
}
/** dtable (V, D) += scatter-add of dout (..., D) at ids (...) (repeated ids accumulate). */
export function embeddingBackward(ids: I32, dout: F32, dtable: F32): F32 {
  const c = new ShapeCheck('embeddingBackward');
  c.tensor('ids', ids, ['...'], 'i32');
  c.tensor('dtable', dtable, ['V', 'D']);
  c.tensor('dout', dout, [...ids.shape, 'D']);
  N.embeddingBwd(ids.numel, c.dim('D'), ids.data, dout.data, dtable.data);
  return dtable;
}

// ---------------------------------------------------------------------------------------------
// Normalization (over the last dim)
// ---------------------------------------------------------------------------------------------
export interface NormOut {
  y: F32;
  /** (rows) saved for backward */
  rstd: F32;
}
/** LayerNorm over the last dim: y = (x - mean) * rstd * w + b (w, b optional). */
export function layerNorm(x: F32, w: F32 | null, b: F32 | null, eps = 1e-5, out?: F32): NormOut & { mean: F32 } {
  const c = new ShapeCheck('layerNorm');
  c.tensor('x', x, ['...', 'D']);
  c.optional('w', w, ['D']);
  c.optional('b', b, ['D']);
  const R = rowsOf(x), D = lastDim(x);
  const y = outOr(c, 'out', out, x.shape);
  const mean = new Tensor('f32', [R]), rstd = new Tensor('f32', [R]);
  N.layernormFwd(R, D, x.data, w?.data ?? null, b?.data ?? null, eps, y.data, mean.data, rstd.data);
  return { y, mean, rstd };
}
/** Gradients of layerNorm: dx fresh; dw, db accumulated (into `acc` if given). */
export function layerNormBackward(
  x: F32, w: F32 | null, mean: F32, rstd: F32, dy: F32, acc: { dw?: F32 | null; db?: F32 | null } = {},
): { dx: F32; dw: F32; db: F32 } {
  const c = new ShapeCheck('layerNormBackward');
  c.tensor('x', x, ['...', 'D']);
  c.optional('w', w, ['D']);
  const R = rowsOf(x), D = lastDim(x);
  c.tensor('mean', mean, [R]);
  c.tensor('rstd', rstd, [R]);
  c.tensor('dy', dy, x.shape);
  const dx = new Tensor('f32', x.shape);
  const dw = accOr(c, 'dw', acc.dw, [D]);
  const db = accOr(c, 'db', acc.db, [D]);
  N.layernormBwd(R, D, x.data, w?.data ?? null, mean.data, rstd.data, dy.data, dx.data, dw.data, db.data);
  return { dx, dw, db };
}
/** RMSNorm over the last dim: y = x / sqrt(mean(x²) + eps) * w (w optional). */
export function rmsNorm(x: F32, w: F32 | null, eps = 1e-6, out?: F32): NormOut {
  const c = new ShapeCheck('rmsNorm');
  c.tensor('x', x, ['...', 'D']);
  c.optional('w', w, ['D']);
  const R = rowsOf(x), D = lastDim(x);
  const y = outOr(c, 'out', out, x.shape);
  const rstd = new Tensor('f32', [R]);
  N.rmsnormFwd(R, D, x.data, w?.data ?? null, eps, y.data, rstd.data);
  return { y, rstd };
}
/** Gradients of rmsNorm: dx fresh; dw accumulated (into `acc.dw` if given). */
export function rmsNormBackward(x: F32, w: F32 | null, rstd: F32, dy: F32, acc: { dw?: F32 | null } = {}): { dx: F32; dw: F32 } {
  const c = new ShapeCheck('rmsNormBackward');
  c.tensor('x', x, ['...', 'D']);
  c.optional('w', w, ['D']);
  const R = rowsOf(x), D = lastDim(x);
  c.tensor('rstd', rstd, [R]);
  c.tensor('dy', dy, x.shape);
  const dx = new Tensor('f32', x.shape);
  const dw = accOr(c, 'dw', acc.dw, [D]);
  N.rmsnormBwd(R, D, x.data, w?.data ?? null, rstd.data, dy.data, dx.data, dw.data);
  return { dx, dw };
}

// ---------------------------------------------------------------------------------------------
// Softmax (over the last dim)
// ---------------------------------------------------------------------------------------------
export function softmax(x: F32, out?: F32): F32 {
  const c = new ShapeCheck('softmax');
  c.tensor('x', x, ['...', 'D']);
  const y = outOr(c, 'out', out, x.shape);
  N.softmaxFwd(rowsOf(x), lastDim(x), x.data, y.data);
  return y;
}
/** dx = y * (dy - sum(dy * y)), y the softmax output. */
export function softmaxBackward(y: F32, dy: F32): F32 {
  const c = new ShapeCheck('softmaxBackward');
  c.same(['y', 'dy'], [y, dy]);
  const dx = new Tensor('f32', y.shape);
  N.softmaxBwd(rowsOf(y), lastDim(y), y.data, dy.data, dx.data);
  return dx;
}
export function logSoftmax(x: F32, out?: F32): F32 {
  const c = new ShapeCheck('logSoftmax');
  c.tensor('x', x, ['...', 'D']);
  const y = outOr(c, 'out', out, x.shape);
  N.logSoftmaxFwd(rowsOf(x), lastDim(x), x.data, y.data);
  return y;
}

// ---------------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------------
/** GELU: exact erf form (default; BERT/DeBERTa "gelu") or tanh form (`approx`; "gelu_new", "gelu_pytorch_tanh"). */
export function gelu(x: F32, opts: { approx?: boolean } = {}, out?: F32): F32 {
  new ShapeCheck('gelu').same(['x', 'out'], [x, out]);
  const y = out ?? new Tensor('f32', x.shape);
  N.geluFwd(x.data, y.data, !!opts.approx);
  return y;
}
export function geluBackward(x: F32, dy: F32, opts: { approx?: boolean } = {}): F32 {
  new ShapeCheck('geluBackward').same(['x', 'dy'], [x, dy]);
  const dx = new Tensor('f32', x.shape);
  N.geluBwd(x.data, dy.data, dx.data, !!opts.approx);
  return dx;
}
export function silu(x: F32, out?: F32): F32 {
  new ShapeCheck('silu').same(['x', 'out'], [x, out]);
  const y = out ?? new Tensor('f32', x.shape);
  N.siluFwd(x.data, y.data);
  return y;
}
export function siluBackward(x: F32, dy: F32): F32 {
  new ShapeCheck('siluBackward').same(['x', 'dy'], [x, dy]);
  const dx = new Tensor('f32', x.shape);
  N.siluBwd(x.data, dy.data, dx.data);
  return dx;
}
/** SwiGLU: y = silu(gate) * up. */
export function swiglu(gate: F32, up: F32, out?: F32): F32 {
  new ShapeCheck('swiglu').same(['gate', 'up', 'out'], [gate, up, out]);
  const y = out ?? new Tensor('f32', gate.shape);
  N.swigluFwd(gate.data, up.data, y.data);
  return y;
}
export function swigluBackward(gate: F32, up: F32, dy: F32): { dgate: F32; dup: F32 } {
  new ShapeCheck('swigluBackward').same(['gate', 'up', 'dy'], [gate, up, dy]);
  const dgate = new Tensor('f32', gate.shape), dup = new Tensor('f32', up.shape);
  N.swigluBwd(gate.data, up.data, dy.data, dgate.data, dup.data);
  return { dgate, dup };
}

// ---------------------------------------------------------------------------------------------
// RoPE (rotate-half layout, as in Hugging Face Llama)
// ---------------------------------------------------------------------------------------------
/** `rope_scaling` of a Hugging Face config, camel-cased. */
export interface RopeScaling {
  type: 'default' | 'llama3' | 'linear';
  factor?: number;
  lowFreqFactor?: number;
  highFreqFactor?: number;
  originalMaxPositionEmbeddings?: number;
}
/** inv_freq (Dh/2) = theta^(-2i/Dh), adjusted by the scaling rule (llama3 / linear). */
export function ropeInvFreq(headDim: number, theta: number, scaling?: RopeScaling | null): F32 {
  if (!Number.isInteger(headDim) || headDim < 2 || headDim % 2) throw new ShapeError(`ropeInvFreq: headDim must be an even integer >= 2, got ${headDim}`);
  const out = new Tensor('f32', [headDim / 2]);
  N.ropeInvFreq(headDim, theta, scaling ?? null, out.data);
  return out;
}
export interface RopeLayout {
  /** heads to rotate per token (default: x.shape[1] for a (T, H, Dh) tensor) */
  heads?: number;
  /** head size (default: last dim of a (T, H, Dh) tensor; 2 * invFreq length otherwise) */
  headDim?: number;
  /** first element of the rotated block within each row of a (T, W) tensor (fused QKV rows) */
  offset?: number;
}
function ropeApply(name: string, x: F32, pos: I32, invFreq: F32, layout: RopeLayout, bwd: boolean): F32 {
  const c = new ShapeCheck(name);
  c.tensor('invFreq', invFreq, ['half']);
  const Dh = layout.headDim ?? 2 * c.dim('half');
  if (Dh !== 2 * c.dim('half')) c.fail(`headDim ${Dh} does not match invFreq of length ${c.dim('half')}`);
  let T: number, H: number, ld: number;
  const off = layout.offset ?? 0;
  if (x.ndim === 3) {
    c.tensor('x', x, ['T', 'H', Dh]);
    T = x.shape[0];
    H = layout.heads ?? x.shape[1];
    ld = x.shape[1] * Dh;
    if (off + H * Dh > ld) c.fail(`offset ${off} + heads ${H} × ${Dh} exceeds the row of ${ld}`);
  } else if (x.ndim === 2) {
    c.tensor('x', x, ['T', 'W']);
    T = x.shape[0];
    ld = x.shape[1];
    H = layout.heads ?? Math.floor((ld - off) / Dh);
    if (!Number.isInteger(off) || off < 0 || off + H * Dh > ld) c.fail(`offset ${off} + heads ${H} × ${Dh} exceeds the row of ${ld}`);
  } else {
    throw new ShapeError(`${name}: x must be (T, H, Dh) or (T, W), got shape [${x.shape.join(', ')}]`);
  }
  c.tensor('pos', pos, [T], 'i32');
  if (H < 1) c.fail('no heads to rotate');
  if (T === 0) return x;
  N[bwd ? 'ropeBwd' : 'ropeFwd'](T, H, Dh, ld, pos.data, invFreq.data, off ? x.data.subarray(off) : x.data);
  return x;
}
/** Rotates x in place by positions pos (T). x: (T, H, Dh), or (T, W) rows with `layout`. */
export function rope(x: F32, pos: I32, invFreq: F32, layout: RopeLayout = {}): F32 {
  return ropeApply('rope', x, pos, invFreq, layout, false);
}
/** Backward of rope (rotation by the negative angle), in place on the gradient. */
export function ropeBackward(dx: F32, pos: I32, invFreq: F32, layout: RopeLayout = {}): F32 {
  return ropeApply('ropeBackward', dx, pos, invFreq, layout, true);
}

// ---------------------------------------------------------------------------------------------
// Attention
// ---------------------------------------------------------------------------------------------
export interface AttentionOptions {
  /** query i sees key j iff j <= i + qOffset */
  causal?: boolean;
  /** default Tk - Tq (a KV-cached suffix); only used when causal */
  qOffset?: number;
  /** default 1/sqrt(Dh) */
  scale?: number;
  /** (B, Tk): 1 = attend, 0 = padding */
  keyMask?: Uint8Array | null;
  /** additive scores (B|1, Hq|1, Tq, Tk), added after scaling; size-1 dims broadcast */
  bias?: F32 | null;
}
export interface AttentionOut {
  /** (B, Tq, Hq, Dh) */
  out: F32;
  /** (B, Hq, Tq) log-sum-exp of each query's scores (-Infinity for fully masked rows) */
  lse: F32;
}

interface AttnPrep {
  params: Record<string, unknown>;
  B: number;
  Tq: number;
  Tk: number;
  Hq: number;
  Hkv: number;
  Dh: number;
  keyMask: Uint8Array | null;
  bias: Float32Array | null;
  biasShape: readonly number[] | null;
  qShape: readonly number[];
}

function attnPrep(c: ShapeCheck, q: F32, k: F32, v: F32, opts: AttentionOptions): AttnPrep {
  const rank = q.ndim;
  if (rank !== 3 && rank !== 4) c.fail(`q must be (B, Tq, Hq, Dh) or (Tq, Hq, Dh), got shape [${q.shape.join(', ')}]`);
  const lead = rank === 4 ? ['B'] : [];
  c.tensor('q', q, [...lead, 'Tq', 'Hq', 'Dh']);
  c.tensor('k', k, [...lead, 'Tk', 'Hkv', 'Dh']);
  c.tensor('v', v, [...lead, 'Tk', 'Hkv', 'Dh']);
  const B = rank === 4 ? c.dim('B') : 1;
  const Tq = c.dim('Tq'), Tk = c.dim('Tk'), Hq = c.dim('Hq'), Hkv = c.dim('Hkv'), Dh = c.dim('Dh');
  if (Dh < 1) c.fail('head dim must be >= 1');
  if (Hkv < 1 || Hq % Hkv !== 0) c.fail(`Hq (${Hq}) must be a multiple of Hkv (${Hkv}) (grouped-query attention)`);
  const qOffset = opts.qOffset ?? Tk - Tq;
  if (!Number.isInteger(qOffset)) c.fail(`qOffset must be an integer, got ${qOffset}`);
  let keyMask: Uint8Array | null = null;
  if (opts.keyMask != null) {
    if (!(opts.keyMask instanceof Uint8Array)) c.fail('keyMask must be a Uint8Array (B × Tk, 1 = attend)');
    if (opts.keyMask.length !== B * Tk) c.fail(`keyMask has ${opts.keyMask.length} elements, expected B × Tk = ${B * Tk}`);
    keyMask = opts.keyMask;
  }
  let biasStrides: number[] | undefined;
  let bias: Float32Array | null = null;
  let biasShape: readonly number[] | null = null;
  if (opts.bias != null) {
    const b = opts.bias;
    c.tensor('bias', b, ['bB', 'bH', Tq, Tk]);
    const [bB, bH] = b.shape;
    if (bB !== 1 && bB !== B) c.fail(`bias has batch dim ${bB}, expected 1 or ${B}`);
    if (bH !== 1 && bH !== Hq) c.fail(`bias has head dim ${bH}, expected 1 or ${Hq}`);
    biasStrides = [bB === 1 ? 0 : bH * Tq * Tk, bH === 1 ? 0 : Tq * Tk, Tk];
    bias = b.data;
    biasShape = b.shape;
  }
  const params = { B, Tq, Tk, Hq, Hkv, Dh, causal: !!opts.causal, qOffset, scale: opts.scale ?? 0, biasStrides };
  return { params, B, Tq, Tk, Hq, Hkv, Dh, keyMask, bias, biasShape, qShape: q.shape };
}

function attnOut(p: AttnPrep): AttentionOut {
  return { out: new Tensor('f32', p.qShape), lse: new Tensor('f32', [p.B, p.Hq, p.Tq]) };
}

/** Scaled dot-product attention (tiled online softmax; never materializes Tq × Tk). */
export function attention(q: F32, k: F32, v: F32, opts: AttentionOptions = {}): AttentionOut {
  const p = attnPrep(new ShapeCheck('attention'), q, k, v, opts);
  const r = attnOut(p);
  N.attentionFwd(p.params, q.data, k.data, v.data, r.out.data, r.lse.data, p.keyMask, p.bias);
  return r;
}
export async function attentionAsync(q: F32, k: F32, v: F32, opts: AttentionOptions = {}): Promise<AttentionOut> {
  const p = attnPrep(new ShapeCheck('attention'), q, k, v, opts);
  const r = attnOut(p);
  await N.attentionFwdAsync(p.params, q.data, k.data, v.data, r.out.data, r.lse.data, p.keyMask, p.bias);
  return r;
}

export interface AttentionGrads {
  dq: F32;
  dk: F32;
  dv: F32;
  /** like opts.bias (summed over its broadcast dims); null without a bias */
  dbias: F32 | null;
}
function attnBwdPrep(q: F32, k: F32, v: F32, fwd: AttentionOut, dout: F32, opts: AttentionOptions) {
  const c = new ShapeCheck('attentionBackward');
  const p = attnPrep(c, q, k, v, opts);
  c.tensor('out', fwd.out, q.shape);
  c.tensor('lse', fwd.lse, [p.B, p.Hq, p.Tq]);
  c.tensor('dout', dout, q.shape);
  const g: AttentionGrads = {
    dq: new Tensor('f32', q.shape),
    dk: new Tensor('f32', k.shape),
    dv: new Tensor('f32', v.shape),
    dbias: p.biasShape ? new Tensor('f32', p.biasShape) : null,
  };
  const args = [p.params, q.data, k.data, v.data, fwd.out.data, fwd.lse.data, dout.data, g.dq.data, g.dk.data, g.dv.data,
    p.keyMask, p.bias, g.dbias?.data ?? null];
  return { g, args };
}
/** Gradients of attention, recomputing probabilities from the saved lse. */
export function attentionBackward(q: F32, k: F32, v: F32, fwd: AttentionOut, dout: F32, opts: AttentionOptions = {}): AttentionGrads {
  const { g, args } = attnBwdPrep(q, k, v, fwd, dout, opts);
  N.attentionBwd(...args);
  return g;
}
export async function attentionBackwardAsync(
  q: F32, k: F32, v: F32, fwd: AttentionOut, dout: F32, opts: AttentionOptions = {},
): Promise<AttentionGrads> {
  const { g, args } = attnBwdPrep(q, k, v, fwd, dout, opts);
  await N.attentionBwdAsync(...args);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy
// ---------------------------------------------------------------------------------------------
export interface CrossEntropyOut {
  /** mean loss over rows whose label is >= 0 (0 when none) */
  loss: number;
  /** (T) per-row losses (0 for ignored rows) */
  losses: F32;
  /** (T, V) gradient of the mean loss, when asked for */
  dlogits: F32 | null;
}
function cePrep(logits: F32, labels: I32, grad: boolean) {
  const c = new ShapeCheck('crossEntropy');
  c.tensor('logits', logits, ['T', 'V']);
  c.tensor('labels', labels, ['T'], 'i32');
  const T = c.dim('T'), V = c.dim('V');
  if (V < 1) c.fail('vocabulary must not be empty');
  for (let t = 0; t < T; t++) {
    const l = labels.data[t];
    if (l >= V) c.fail(`labels[${t}] = ${l} is out of range [0, ${V}) (use a negative label such as -100 to ignore a row)`);
  }
  return { T, V, losses: new Tensor('f32', [T]), dlogits: grad ? new Tensor('f32', [T, V]) : null };
}
/** Mean cross-entropy of logits (T, V) against labels (T); labels < 0 (e.g. -100) are ignored. */
export function crossEntropy(logits: F32, labels: I32, opts: { grad?: boolean } = {}): CrossEntropyOut {
  const p = cePrep(logits, labels, !!opts.grad);
  const loss = N.crossEntropy(p.T, p.V, logits.data, labels.data, p.dlogits?.data ?? null, p.losses.data) as number;
  return { loss, losses: p.losses, dlogits: p.dlogits };
}
export async function crossEntropyAsync(logits: F32, labels: I32, opts: { grad?: boolean } = {}): Promise<CrossEntropyOut> {
  const p = cePrep(logits, labels, !!opts.grad);
  const loss = (await N.crossEntropyAsync(p.T, p.V, logits.data, labels.data, p.dlogits?.data ?? null, p.losses.data)) as number;
  return { loss, losses: p.losses, dlogits: p.dlogits };
}

// ---------------------------------------------------------------------------------------------
// Optimizer
// ---------------------------------------------------------------------------------------------
export interface AdamWOptions {
  lr: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
  /** 1-based step count (bias correction) */
  step: number;
  /** g is read as g·gradScale (gradient clipping's coefficient; g itself is not changed). Default 1. */
  gradScale?: number;
}
/** One AdamW step (PyTorch semantics, decoupled weight decay), in place on p, m, v. */
export function adamwStep(p: F32, g: F32, m: F32, v: F32, o: AdamWOptions): void {
  new ShapeCheck('adamwStep').same(['p', 'g', 'm', 'v'], [p, g, m, v]);
  if (!Number.isInteger(o.step) || o.step < 1) throw new ShapeError(`adamwStep: step must be an integer >= 1, got ${o.step}`);
  N.adamwStep(p.data, g.data, m.data, v.data, o.lr, o.beta1 ?? 0.9, o.beta2 ?? 0.999, o.eps ?? 1e-8, o.weightDecay ?? 0.01, o.step,
    o.gradScale ?? 1);
}
/**
 * Greedy sampling's argmax over a row of logits: the index of the first largest value (what a scan with `>` finds:
 * NaN is never larger, the lowest index wins ties), -1 when no value is above -Infinity. Native and vectorized
 * (a JS scan over a 49,152-152,064 token vocabulary costs about 1 ns a value).
 */
export function argmaxF32(x: Float32Array): number {
  return N.argmax(x) as number;
}
/** L2 norm of a tensor (for global gradient clipping). */
export function l2Norm(g: F32): number {
  new ShapeCheck('l2Norm').tensor('g', g, ['...']);
  return N.l2Norm(g.data) as number;
}

// ---------------------------------------------------------------------------------------------
// LoRA linear: y = x·Wᵀ + bias + s·(x·Aᵀ)·Bᵀ, W frozen
// ---------------------------------------------------------------------------------------------
export interface LoraWeights {
  /** (N, K) frozen base weight, f32 / bf16 / f16 */
  w: Tensor<'f32' | 'bf16' | 'f16'>;
  /** (N) optional frozen bias */
  bias?: F32 | null;
  /** (r, K) */
  A: F32;
  /** (N, r) */
  B: F32;
  /** alpha / r */
  scale: number;
}
export interface LoraOut {
  /** (M, N) */
  y: F32;
  /** (M, r) = x·Aᵀ, kept for backward */
  xa: F32;
}
function loraPrep(c: ShapeCheck, x: F32, l: LoraWeights) {
  c.tensor('x', x, ['...', 'K']);
  c.tensor('w', l.w, ['N', 'K'], ['f32', 'bf16', 'f16']);
  c.optional('bias', l.bias, ['N']);
  c.tensor('A', l.A, ['r', 'K']);
  c.tensor('B', l.B, ['N', 'r']);
  if (typeof l.scale !== 'number' || !Number.isFinite(l.scale)) c.fail(`scale must be a finite number, got ${l.scale}`);
  return { M: rowsOf(x), N: c.dim('N'), K: c.dim('K'), r: c.dim('r'), lead: x.shape.slice(0, -1) };
}
function loraFwdArgs(x: F32, l: LoraWeights) {
  const d = loraPrep(new ShapeCheck('lora'), x, l);
  const out: LoraOut = { y: new Tensor('f32', [...d.lead, d.N]), xa: new Tensor('f32', [...d.lead, d.r]) };
  const args = [d.M, d.N, d.K, d.r, x.data, l.w.dtype, l.w.data, l.bias?.data ?? null, l.A.data, l.B.data, l.scale, out.xa.data, out.y.data];
  return { out, args };
}
export function lora(x: F32, l: LoraWeights): LoraOut {
  const { out, args } = loraFwdArgs(x, l);
  N.loraFwd(...args);
  return out;
}
export async function loraAsync(x: F32, l: LoraWeights): Promise<LoraOut> {
  const { out, args } = loraFwdArgs(x, l);
  await N.loraFwdAsync(...args);
  return out;
}
export interface LoraGrads {
  /** (..., K) */
  dx: F32;
  /** (r, K), accumulated */
  dA: F32;
  /** (N, r), accumulated */
  dB: F32;
}
function loraBwdArgs(x: F32, l: LoraWeights, xa: F32, dy: F32, acc: { dA?: F32 | null; dB?: F32 | null }) {
  const c = new ShapeCheck('loraBackward');
  const d = loraPrep(c, x, l);
  c.tensor('xa', xa, [...d.lead, d.r]);
  c.tensor('dy', dy, [...d.lead, d.N]);
  const g: LoraGrads = {
    dx: new Tensor('f32', x.shape),
    dA: accOr(c, 'dA', acc.dA, [d.r, d.K]),
    dB: accOr(c, 'dB', acc.dB, [d.N, d.r]),
  };
  const args = [d.M, d.N, d.K, d.r, x.data, l.w.dtype, l.w.data, l.A.data, l.B.data, l.scale, xa.data, dy.data,
    g.dx.data, g.dA.data, g.dB.data];
  return { g, args };
}
/** Gradients of lora(): dx fresh; dA, dB accumulated (into `acc` if given). W and bias get none. */
export function loraBackward(x: F32, l: LoraWeights, xa: F32, dy: F32, acc: { dA?: F32 | null; dB?: F32 | null } = {}): LoraGrads {
  const { g, args } = loraBwdArgs(x, l, xa, dy, acc);
  N.loraBwd(...args);
  return g;
}
export async function loraBackwardAsync(
  x: F32, l: LoraWeights, xa: F32, dy: F32, acc: { dA?: F32 | null; dB?: F32 | null } = {},
): Promise<LoraGrads> {
  const { g, args } = loraBwdArgs(x, l, xa, dy, acc);
  await N.loraBwdAsync(...args);
  return g;
}

/** Dtypes accepted where a weight may be stored reduced-precision. */
export type WeightTensorDtype = Extract<Dtype, 'f32' | 'bf16' | 'f16'>;
