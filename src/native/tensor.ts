// A small Tensor type for the native ops: a dtype, a row-major shape and a typed array holding
// the elements. The typed array may view JS memory or native memory (an mmap'ed safetensors
// file, a buffer owned by the addon): the ops only ever see a pointer and a length.
//
//   f32  -> Float32Array
//   bf16 -> Uint16Array (raw bf16 bits, as stored in checkpoints)
//   f16  -> Uint16Array (raw IEEE half bits)
//   i32  -> Int32Array (token ids, positions, labels)

export type Dtype = 'f32' | 'bf16' | 'f16' | 'i32';

export interface DataOf {
  f32: Float32Array;
  bf16: Uint16Array;
  f16: Uint16Array;
  i32: Int32Array;
}

/** A shape or argument that does not fit what an op expects. */
export class ShapeError extends RangeError {
  override name = 'ShapeError';
}

function arrayCtor(dtype: Dtype) {
  switch (dtype) {
    case 'f32': return Float32Array;
    case 'bf16':
    case 'f16': return Uint16Array;
    case 'i32': return Int32Array;
    default: throw new TypeError(`unknown dtype '${String(dtype)}': expected f32 | bf16 | f16 | i32`);
  }
}

function checkShape(shape: readonly number[]): number {
  if (!Array.isArray(shape)) throw new ShapeError(`shape must be an array of non-negative integers`);
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new ShapeError(`invalid shape [${shape.join(', ')}]: dims must be non-negative integers`);
    n *= d;
  }
  return n;
}

export function shapeStr(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

export class Tensor<D extends Dtype = Dtype> {
  readonly dtype: D;
  readonly shape: readonly number[];
  readonly data: DataOf[D];

  /** Wraps `data` (which must hold exactly prod(shape) elements of the dtype's array type), or allocates zeros. */
  constructor(dtype: D, shape: readonly number[], data?: DataOf[D]) {
    const n = checkShape(shape);
    const Ctor = arrayCtor(dtype);
    if (data === undefined) {
      data = new Ctor(n) as DataOf[D];
    } else {
      if (!(data instanceof Ctor)) {
        throw new TypeError(`${dtype} tensor data must be a ${Ctor.name}, got ${(data as object)?.constructor?.name ?? typeof data}`);
      }
      if (data.length !== n) {
        throw new ShapeError(`data has ${data.length} elements but shape ${shapeStr(shape)} needs ${n}`);
      }
    }
    this.dtype = dtype;
    this.shape = Object.freeze([...shape]);
    this.data = data;
  }

  static zeros<D extends Dtype = 'f32'>(shape: readonly number[], dtype: D = 'f32' as D): Tensor<D> {
    return new Tensor(dtype, shape);
  }

  /** f32 tensor from numbers (copied). */
  static f32(shape: readonly number[], values?: ArrayLike<number>): Tensor<'f32'> {
    if (values === undefined) return new Tensor('f32', shape);
    return new Tensor('f32', shape, Float32Array.from(values));
  }

  /** i32 tensor from numbers (copied). */
  static i32(shape: readonly number[], values: ArrayLike<number>): Tensor<'i32'> {
    return new Tensor('i32', shape, Int32Array.from(values));
  }

  get ndim(): number {
    return this.shape.length;
  }

  get numel(): number {
    return this.data.length;
  }

  /** Size of dim `i` (negative counts from the end). */
  size(i: number): number {
    const k = i < 0 ? this.shape.length + i : i;
    if (k < 0 || k >= this.shape.length) throw new ShapeError(`dim ${i} out of range for shape ${shapeStr(this.shape)}`);
    return this.shape[k];
  }

  /** Same data, another shape with the same element count (-1 infers one dim). */
  reshape(shape: readonly number[]): Tensor<D> {
    const s = [...shape];
    const neg = s.indexOf(-1);
    if (neg >= 0) {
      const rest = s.reduce((a, d, i) => (i === neg ? a : a * d), 1);
      if (rest === 0 || this.numel % rest !== 0) throw new ShapeError(`cannot reshape ${shapeStr(this.shape)} to ${shapeStr(shape)}`);
      s[neg] = this.numel / rest;
    }
    if (checkShape(s) !== this.numel) throw new ShapeError(`cannot reshape ${shapeStr(this.shape)} (${this.numel} elements) to ${shapeStr(shape)}`);
    return new Tensor(this.dtype, s, this.data);
  }

  /** A copy with its own memory. */
  clone(): Tensor<D> {
    return new Tensor(this.dtype, this.shape, this.data.slice() as DataOf[D]);
  }

  toString(): string {
    return `Tensor(${this.dtype}, ${shapeStr(this.shape)})`;
  }
}

/**
 * Checks tensors of one op call against symbolic shapes, binding names to sizes on first use:
 *
 *   const c = new ShapeCheck('rmsnorm');
 *   c.tensor('x', x, ['...', 'D']);   // '...' = any leading dims (their product is bound to '...')
 *   c.tensor('w', w, ['D']);           // must match D bound from x
 *
 * Errors name the op, the argument, the shape it has and the one it needs.
 */
export class ShapeCheck {
  private readonly dims = new Map<string, { value: number; from: string }>();
  constructor(readonly op: string) {}

  fail(msg: string): never {
    throw new ShapeError(`${this.op}: ${msg}`);
  }

  dim(name: string): number {
    const d = this.dims.get(name);
    if (!d) throw new Error(`${this.op}: internal: dim ${name} not bound`);
    return d.value;
  }

  bind(name: string, value: number, from: string): void {
    const have = this.dims.get(name);
    if (have === undefined) {
      this.dims.set(name, { value, from });
    } else if (have.value !== value) {
      this.fail(`${from} has ${name} = ${value}, but ${have.from} has ${name} = ${have.value}`);
    }
  }

  tensor(name: string, t: unknown, spec: readonly (string | number)[], dtypes: Dtype | readonly Dtype[] = 'f32'): void {
    if (!(t instanceof Tensor)) this.fail(`${name} must be a Tensor, got ${t === null ? 'null' : typeof t}`);
    const allowed = typeof dtypes === 'string' ? [dtypes] : dtypes;
    if (!allowed.includes(t.dtype)) this.fail(`${name} must have dtype ${allowed.join(' | ')}, got ${t.dtype}`);
    const shape = t.shape;
    const expected = `[${spec.join(', ')}]`;
    const hasRest = spec[0] === '...';
    const fixed = hasRest ? spec.slice(1) : spec;
    if (hasRest ? shape.length < fixed.length : shape.length !== fixed.length) {
      this.fail(`${name} has shape ${shapeStr(shape)}, expected ${expected}`);
    }
    const lead = shape.length - fixed.length;
    if (hasRest) this.bind('...', shape.slice(0, lead).reduce((a, b) => a * b, 1), `${name} ${shapeStr(shape)}`);
    fixed.forEach((s, i) => {
      const v = shape[lead + i];
      if (typeof s === 'number') {
        if (v !== s) this.fail(`${name} has shape ${shapeStr(shape)}, expected ${expected} (dim ${lead + i} must be ${s})`);
      } else {
        this.bind(s, v, `${name} ${shapeStr(shape)}`);
      }
    });
  }

  /** Same as tensor() but null / undefined pass. */
  optional(name: string, t: unknown, spec: readonly (string | number)[], dtypes: Dtype | readonly Dtype[] = 'f32'): void {
    if (t === null || t === undefined) return;
    this.tensor(name, t, spec, dtypes);
  }

  /** Tensors that must have exactly the same shape (elementwise ops); null / undefined pass. */
  same(names: string[], ts: unknown[], dtypes: Dtype | readonly Dtype[] = 'f32'): void {
    const first = ts[0];
    this.tensor(names[0], first, (first as Tensor)?.shape ?? [], dtypes);
    const ref = (first as Tensor).shape;
    ts.forEach((t, i) => {
      if (i === 0 || t === null || t === undefined) return;
      if (!(t instanceof Tensor)) this.fail(`${names[i]} must be a Tensor, got ${typeof t}`);
      const allowed = typeof dtypes === 'string' ? [dtypes] : dtypes;
      if (!allowed.includes(t.dtype)) this.fail(`${names[i]} must have dtype ${allowed.join(' | ')}, got ${t.dtype}`);
      if (t.shape.length !== ref.length || t.shape.some((d, k) => d !== ref[k])) {
        this.fail(`${names[i]} has shape ${shapeStr(t.shape)} but ${names[0]} has ${shapeStr(ref)} (shapes must be equal)`);
      }
    });
  }
}
