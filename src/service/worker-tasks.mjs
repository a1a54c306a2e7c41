// Piscina worker: CPU-bound JavaScript kept off the event loop (plain JS so it loads in any
// worker thread without a TypeScript loader). Tasks:
//   {op: 'parse_validate', body: Uint8Array, schemaId, schema} -> {ok, value} | {ok: false, kind: 'json'|'schema', message, errors}
//   {op: 'validate', data, schemaId, schema}                    -> {ok, errors}
//   {op: 'span_f1', gold: [[start,end,label]...][], pred: same} -> {precision, recall, f1, tp, fp, fn, per_label}
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { badJsonValue } from './json-input.mjs';

const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false });
addFormats.default ? addFormats.default(ajv) : addFormats(ajv);
const compiled = new Map();

function validator(schemaId, schema) {
  let v = compiled.get(schemaId);
  if (!v) { v = ajv.compile(schema); compiled.set(schemaId, v); }
  return v;
}

const issues = (errs) => (errs ?? []).map((e) => ({ path: e.instancePath, message: e.message ?? 'invalid', keyword: e.keyword }));

function spanF1(gold, pred) {
  let tp = 0, fp = 0, fn = 0;
  const per = new Map();
  const get = (l) => { let x = per.get(l); if (!x) { x = { tp: 0, fp: 0, fn: 0 }; per.set(l, x); } return x; };
  for (let i = 0; i < gold.length; i++) {
    const g = new Set((gold[i] ?? []).map((s) => `${s[0]}\u0000${s[1]}\u0000${s[2]}`));
    const p = new Set((pred[i] ?? []).map((s) => `${s[0]}\u0000${s[1]}\u0000${s[2]}`));
    for (const k of p) { const l = k.split('\u0000')[2]; if (g.has(k)) { tp++; get(l).tp++; } else { fp++; get(l).fp++; } }
    for (const k of g) if (!p.has(k)) { fn++; get(k.split('\u0000')[2]).fn++; }
  }
  const prf = (x) => {
    const precision = x.tp + x.fp ? x.tp / (x.tp + x.fp) : 0;
    const recall = x.tp + x.fn ? x.tp / (x.tp + x.fn) : 0;
    return { precision, recall, f1: precision + recall ? (2 * precision * recall) / (precision + recall) : 0, ...x };
  };
  return { ...prf({ tp, fp, fn }), per_label: Object.fromEntries([...per].map(([l, x]) => [l, prf(x)])) };
}

export default function run(task) {
  switch (task.op) {
    case 'parse_validate': {
      let value;
      try { value = JSON.parse(Buffer.from(task.body).toString('utf8')); } catch (e) { return { ok: false, kind: 'json', message: e.message }; }
      const bad = badJsonValue(value);
      if (bad) return { ok: false, kind: 'schema', message: 'Request validation failed', errors: [bad] };
      const v = validator(task.schemaId, task.schema);
      if (!v(value)) return { ok: false, kind: 'schema', message: 'Request validation failed', errors: issues(v.errors) };
      return { ok: true, value };
    }
    case 'validate': {
      const v = validator(task.schemaId, task.schema);
      return v(task.data) ? { ok: true, errors: [] } : { ok: false, errors: issues(v.errors) };
    }
    case 'span_f1': return spanF1(task.gold, task.pred);
    default: throw new Error(`unknown worker op ${task.op}`);
  }
}
