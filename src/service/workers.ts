// The Piscina worker pool for CPU-bound JavaScript (large-body parsing + validation, scoring).
// Model compute never runs here: it stays in the native core's own threads.
import { Piscina } from 'piscina';
import type { ValidationIssue } from './errors.ts';

export type ParseValidateResult = { ok: true; value: unknown } | { ok: false; kind: 'json' | 'schema'; message: string; errors?: ValidationIssue[] };
export interface SpanF1 { precision: number; recall: number; f1: number; tp: number; fp: number; fn: number; per_label: Record<string, { precision: number; recall: number; f1: number; tp: number; fp: number; fn: number }> }

export function createWorkerPool(opts: { threads: number }) {
  const pool = new Piscina({
    filename: new URL('./worker-tasks.mjs', import.meta.url).href,
    minThreads: 0,
    maxThreads: Math.max(1, opts.threads),
    idleTimeout: 30_000,
  });
  return {
    /** JSON.parse + ajv validation in a worker (the body's bytes are transferred, not copied) */
    parseValidate(body: Uint8Array, schemaId: string, schema: object): Promise<ParseValidateResult> {
      const copy = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength ? body : body.slice();
      return pool.run({ op: 'parse_validate', body: copy, schemaId, schema }, { transferList: [copy.buffer as ArrayBuffer] });
    },
    validate(data: unknown, schemaId: string, schema: object): Promise<{ ok: boolean; errors: ValidationIssue[] }> {
      return pool.run({ op: 'validate', data, schemaId, schema });
    },
    /** strict span matching (exact start, end, label), micro-averaged, with per-label scores */
    spanF1(gold: Array<Array<[number, number, string]>>, pred: Array<Array<[number, number, string]>>): Promise<SpanF1> {
      return pool.run({ op: 'span_f1', gold, pred });
    },
    get queueSize() { return pool.queueSize; },
    close: () => pool.destroy(),
  };
}
export type WorkerPool = ReturnType<typeof createWorkerPool>;
