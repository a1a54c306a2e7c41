// Schema normalization: the service's schema input (spec section 4, POST /inference) → one
// validated internal form. Accepted input (every form the service and the reference library use):
//   string[]                                     entity labels
//   { entities?:       string[] | {name, description?, dtype?, threshold?}[] | {label: description} |
//                      {label: {description?, dtype?, threshold?}},
//     classifications?: {task, labels: string[] | {label: description}, multi_label?, cls_threshold?,
//                        label_descriptions?, examples?: [input, label][], prompt?, class_act?}[],
//     structures?:     {name: (fieldSpec)[] | {fields: fieldSpec[]} | {field: fieldSpec-without-name}},
//                      fieldSpec = "name::str::description" | "name::[a|b]::str" | "name::list" |
//                                  {name, dtype?, description?, choices?, threshold?,
//                                   validators?: {pattern, mode?, exclude?, ignore_case?}[]},
//     relations?:      string[] | {name, description?, threshold?}[] | {rel: {...}}[] | {rel: {...}} }
// Bad input throws SchemaError (the service answers 422 with its message); a schema over one of
// ENCODER_LIMITS (names, descriptions, labels per task, tasks) throws InputLimitError with the
// JSON pointer of the offending value ('/schema/entities/3'), before any tokenization or native call.

import { ENCODER_LIMITS, InputLimitError, overLimit, type EncoderLimit } from './limits.ts';
import { MAX_VALIDATORS, parseValidator, type ValidatorSpec } from './validators.ts';

export class SchemaError extends Error {
  override name = 'SchemaError';
}

export type Dtype = 'list' | 'str';

export interface EntitySpec {
  name: string;
  description?: string;
  dtype: Dtype;
  threshold?: number;
}
export interface FieldSpec {
  name: string;
  dtype: Dtype;
  description?: string;
  choices?: string[];
  threshold?: number;
  /** regex validators (structure fields without choices): a span is kept only if all pass */
  validators?: ValidatorSpec[];
}
export interface StructureSpec {
  name: string;
  fields: FieldSpec[];
}
export interface RelationSpec {
  name: string;
  description?: string;
  threshold?: number;
}
export interface ClassificationSpec {
  task: string;
  labels: string[];
  labelDescriptions?: Record<string, string>;
  multiLabel: boolean;
  clsThreshold: number;
  examples?: [string, string][];
  prompt?: string;
  classAct: 'auto' | 'sigmoid' | 'softmax';
}
export interface Schema {
  /** undefined: no entity task. */
  entities?: EntitySpec[];
  structures: StructureSpec[];
  relations: RelationSpec[];
  classifications: ClassificationSpec[];
}

export type SchemaInput = string[] | Record<string, unknown>;

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** JSON pointer `base/key` (RFC 6901 escaping). */
const ptr = (base: string, key: string | number) => `${base}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`;

/** Throws InputLimitError when `n` is over ENCODER_LIMITS[limit]. */
function cap(n: number, limit: EncoderLimit, path: string, what: string): void {
  if (n > ENCODER_LIMITS[limit]) throw overLimit(limit, path, `${what} is ${n}, over the limit`);
}
/** A name (label, field, choice, task): at most nameChars UTF-16 units. */
function capName(v: unknown, path: string): void {
  if (typeof v === 'string') cap(v.length, 'nameChars', path, 'the length of the name');
}
/** A description / prompt / example text: at most descriptionChars UTF-16 units. */
function capText(v: unknown, path: string): void {
  if (typeof v === 'string') cap(v.length, 'descriptionChars', path, 'the length of the text');
}
/** A list or object of labels / fields / choices: at most `labels` entries. */
function capCount(v: unknown, path: string, limit: EncoderLimit = 'labels'): void {
  const n = Array.isArray(v) ? v.length : isObj(v) ? Object.keys(v).length : 0;
  cap(n, limit, path, 'the number of entries');
}

function str(v: unknown, what: string): string {
  if (typeof v !== 'string' || v.trim() === '') throw new SchemaError(`${what} must be a non-empty string`);
  return v;
}
function optStr(v: unknown, what: string): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw new SchemaError(`${what} must be a string`);
  return v;
}
function optThreshold(v: unknown, what: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > 1) throw new SchemaError(`${what} must be a number between 0 and 1`);
  return v;
}
function dtype(v: unknown, what: string, def: Dtype): Dtype {
  if (v === undefined || v === null) return def;
  if (v !== 'list' && v !== 'str') throw new SchemaError(`${what} must be "list" or "str"`);
  return v;
}
function dedupe<T extends { name: string }>(items: T[]): T[] {
  const seen = new Set<string>();
  return items.filter((x) => (seen.has(x.name) ? false : (seen.add(x.name), true)));
}

function parseEntities(v: unknown, at: string): EntitySpec[] {
  const out: EntitySpec[] = [];
  capCount(v, at);
  if (Array.isArray(v)) {
    v.forEach((e, i) => {
      if (typeof e === 'string') capName(e, ptr(at, i));
      else if (isObj(e)) {
        capName(e.name ?? e.label, ptr(ptr(at, i), e.name !== undefined ? 'name' : 'label'));
        capText(e.description, ptr(ptr(at, i), 'description'));
      }
      if (typeof e === 'string') out.push({ name: str(e, `entities[${i}]`), dtype: 'list' });
      else if (isObj(e)) {
        const name = str(e.name ?? e.label, `entities[${i}].name`);
        out.push({
          name,
          description: optStr(e.description, `entities[${i}].description`),
          dtype: dtype(e.dtype, `entities[${i}].dtype`, 'list'),
          threshold: optThreshold(e.threshold, `entities[${i}].threshold`),
        });
      } else throw new SchemaError(`entities[${i}] must be a string or an object with a name`);
    });
  } else if (isObj(v)) {
    for (const [name, spec] of Object.entries(v)) {
      capName(name, ptr(at, name));
      capText(isObj(spec) ? spec.description : spec, isObj(spec) ? ptr(ptr(at, name), 'description') : ptr(at, name));
      str(name, 'entity label');
      if (typeof spec === 'string' || spec === null || spec === undefined) out.push({ name, description: optStr(spec, `entities.${name}`), dtype: 'list' });
      else if (isObj(spec))
        out.push({
          name,
          description: optStr(spec.description, `entities.${name}.description`),
          dtype: dtype(spec.dtype, `entities.${name}.dtype`, 'list'),
          threshold: optThreshold(spec.threshold, `entities.${name}.threshold`),
        });
      else throw new SchemaError(`entities.${name} must be a description string or an object`);
    }
  } else throw new SchemaError('entities must be an array of labels or an object');
  return dedupe(out);
}

/** "name::str::description", "name::[a|b]::str", "name::list" (reference extract_json string specs). */
export function parseFieldString(spec: string, what: string): FieldSpec {
  const parts = spec.split('::');
  const name = str(parts[0], `${what} name`);
  let dt: Dtype | undefined;
  let choices: string[] | undefined;
  let description: string | undefined;
  for (const p of parts.slice(1)) {
    if (p === 'str' || p === 'list') dt = p;
    else if (p.startsWith('[') && p.endsWith(']')) choices = p.slice(1, -1).split('|').map((c) => c.trim()).filter((c) => c !== '');
    else if (p !== '') description = p;
  }
  return { name, dtype: dt ?? (choices ? 'str' : 'list'), description, choices: choices?.length ? choices : undefined };
}

function parseField(f: unknown, what: string, at: string, nameHint?: string): FieldSpec {
  if (typeof f === 'string') {
    const fs = parseFieldString(nameHint !== undefined ? `${nameHint}::${f}` : f, what);
    capName(fs.name, at);
    capText(fs.description, at);
    capCount(fs.choices, at);
    fs.choices?.forEach((c) => capName(c, at));
    return fs;
  }
  if (isObj(f)) {
    capName(f.name ?? nameHint, f.name !== undefined ? ptr(at, 'name') : at);
    capText(f.description, ptr(at, 'description'));
    capCount(f.choices, ptr(at, 'choices'));
    if (Array.isArray(f.choices)) f.choices.forEach((c, i) => capName(c, ptr(ptr(at, 'choices'), i)));
    const name = str(f.name ?? nameHint, `${what}.name`);
    let choices: string[] | undefined;
    if (f.choices !== undefined && f.choices !== null) {
      if (!Array.isArray(f.choices) || !f.choices.every((c) => typeof c === 'string' && c !== ''))
        throw new SchemaError(`${what}.choices must be an array of strings`);
      choices = [...new Set(f.choices as string[])];
    }
    let validators: ValidatorSpec[] | undefined;
    if (f.validators !== undefined && f.validators !== null) {
      if (!Array.isArray(f.validators)) throw new SchemaError(`${what}.validators must be an array`);
      if (f.validators.length > MAX_VALIDATORS) throw new SchemaError(`${what}.validators: at most ${MAX_VALIDATORS}`);
      validators = f.validators.map((v, i) => parseValidator(v, `${what}.validators[${i}]`));
      if (!validators.length) validators = undefined;
    }
    return {
      name,
      dtype: dtype(f.dtype, `${what}.dtype`, choices ? 'str' : 'list'),
      description: optStr(f.description, `${what}.description`),
      choices,
      threshold: optThreshold(f.threshold, `${what}.threshold`),
      ...(validators ? { validators } : {}),
    };
  }
  throw new SchemaError(`${what} must be a field spec string or object`);
}

function parseStructures(v: unknown): StructureSpec[] {
  if (!isObj(v)) throw new SchemaError('structures must be an object mapping structure names to field lists');
  const out: StructureSpec[] = [];
  capCount(v, '/schema/structures', 'tasks');
  for (const [name, spec] of Object.entries(v)) {
    const at = ptr('/schema/structures', name);
    capName(name, at);
    str(name, 'structure name');
    let fields: FieldSpec[];
    const fl = isObj(spec) && Array.isArray(spec.fields) ? spec.fields : spec;
    const fat = isObj(spec) && Array.isArray(spec.fields) ? ptr(at, 'fields') : at;
    capCount(fl, fat);
    if (Array.isArray(fl)) fields = fl.map((f, i) => parseField(f, `structures.${name}[${i}]`, ptr(fat, i)));
    else if (isObj(fl))
      fields = Object.entries(fl).map(([fname, f]) =>
        parseField(f ?? '', `structures.${name}.${fname}`, ptr(fat, fname), fname));
    else throw new SchemaError(`structures.${name} must be a list of fields`);
    fields = dedupe(fields);
    if (fields.length === 0) throw new SchemaError(`structures.${name} has no fields`);
    out.push({ name, fields });
  }
  return out;
}

function parseRelations(v: unknown): RelationSpec[] {
  const out: RelationSpec[] = [];
  capCount(v, '/schema/relations', 'tasks');
  const one = (r: unknown, what: string, at: string) => {
    if (typeof r === 'string') capName(r, at);
    else if (isObj(r)) {
      capCount(r, at, 'tasks');
      for (const [k, x] of Object.entries(r)) {
        if (k === 'name' || k === 'relation') capName(x, ptr(at, k));
        else if (k === 'description') capText(x, ptr(at, k));
        else {
          capName(k, ptr(at, k));
          capText(isObj(x) ? x.description : x, isObj(x) ? ptr(ptr(at, k), 'description') : ptr(at, k));
        }
      }
    }
    if (typeof r === 'string') out.push({ name: str(r, what) });
    else if (isObj(r)) {
      if (typeof r.name === 'string' || typeof r.relation === 'string')
        out.push({
          name: str(r.name ?? r.relation, `${what}.name`),
          description: optStr(r.description, `${what}.description`),
          threshold: optThreshold(r.threshold, `${what}.threshold`),
        });
      else {
        const keys = Object.keys(r);
        if (keys.length === 0) throw new SchemaError(`${what} is empty`);
        for (const k of keys) {
          const s = r[k];
          out.push({
            name: str(k, `${what} name`),
            description: isObj(s) ? optStr(s.description, `${what}.${k}.description`) : typeof s === 'string' ? s || undefined : undefined,
            threshold: isObj(s) ? optThreshold(s.threshold, `${what}.${k}.threshold`) : undefined,
          });
        }
      }
    } else throw new SchemaError(`${what} must be a relation name or object`);
  };
  if (Array.isArray(v)) v.forEach((r, i) => one(r, `relations[${i}]`, ptr('/schema/relations', i)));
  else if (isObj(v)) one(v, 'relations', '/schema/relations');
  else throw new SchemaError('relations must be an array');
  return dedupe(out);
}

function parseClassifications(v: unknown): ClassificationSpec[] {
  if (!Array.isArray(v)) throw new SchemaError('classifications must be an array of {task, labels}');
  const out: ClassificationSpec[] = [];
  capCount(v, '/schema/classifications', 'tasks');
  v.forEach((c, i) => {
    const w = `classifications[${i}]`;
    if (!isObj(c)) throw new SchemaError(`${w} must be an object with task and labels`);
    const at = ptr('/schema/classifications', i);
    capName(c.task, ptr(at, 'task'));
    capText(c.prompt, ptr(at, 'prompt'));
    capCount(c.labels, ptr(at, 'labels'));
    if (Array.isArray(c.labels)) c.labels.forEach((l, j) => capName(l, ptr(ptr(at, 'labels'), j)));
    else if (isObj(c.labels))
      for (const [l, d] of Object.entries(c.labels)) {
        capName(l, ptr(ptr(at, 'labels'), l));
        capText(d, ptr(ptr(at, 'labels'), l));
      }
    capCount(c.label_descriptions, ptr(at, 'label_descriptions'));
    if (isObj(c.label_descriptions))
      for (const [l, d] of Object.entries(c.label_descriptions)) capText(d, ptr(ptr(at, 'label_descriptions'), l));
    capCount(c.examples, ptr(at, 'examples'), 'tasks');
    if (Array.isArray(c.examples))
      c.examples.forEach((e, j) => {
        const parts = Array.isArray(e) ? e : isObj(e) ? [e.input, e.output] : [];
        parts.forEach((x, k) => capText(x, ptr(ptr(ptr(at, 'examples'), j), k)));
      });
    const task = str(c.task, `${w}.task`);
    let labels: string[];
    let labelDescriptions: Record<string, string> | undefined;
    if (Array.isArray(c.labels)) labels = c.labels.map((l, j) => str(l, `${w}.labels[${j}]`));
    else if (isObj(c.labels)) {
      labels = Object.keys(c.labels);
      labelDescriptions = {};
      for (const [l, d] of Object.entries(c.labels)) {
        const ds = optStr(d, `${w}.labels.${l}`);
        if (ds) labelDescriptions[l] = ds;
      }
    } else throw new SchemaError(`${w}.labels must be an array of strings`);
    labels = [...new Set(labels)];
    if (labels.length === 0) throw new SchemaError(`${w}.labels must not be empty`);
    if (isObj(c.label_descriptions)) {
      labelDescriptions = { ...(labelDescriptions ?? {}) };
      for (const [l, d] of Object.entries(c.label_descriptions)) {
        const ds = optStr(d, `${w}.label_descriptions.${l}`);
        if (ds) labelDescriptions[l] = ds;
      }
    }
    let examples: [string, string][] | undefined;
    if (c.examples !== undefined && c.examples !== null) {
      if (!Array.isArray(c.examples)) throw new SchemaError(`${w}.examples must be an array of [input, label] pairs`);
      examples = c.examples.map((e, j) => {
        if (Array.isArray(e) && e.length === 2 && typeof e[0] === 'string' && typeof e[1] === 'string') return [e[0], e[1]];
        if (isObj(e) && typeof e.input === 'string' && typeof e.output === 'string') return [e.input, e.output];
        throw new SchemaError(`${w}.examples[${j}] must be an [input, label] pair`);
      });
    }
    const multi = c.multi_label ?? c.multiLabel ?? false;
    if (typeof multi !== 'boolean') throw new SchemaError(`${w}.multi_label must be a boolean`);
    const act = c.class_act ?? 'auto';
    if (act !== 'auto' && act !== 'sigmoid' && act !== 'softmax') throw new SchemaError(`${w}.class_act must be auto, sigmoid or softmax`);
    out.push({
      task,
      labels,
      labelDescriptions: labelDescriptions && Object.keys(labelDescriptions).length ? labelDescriptions : undefined,
      multiLabel: multi,
      clsThreshold: optThreshold(c.cls_threshold ?? c.threshold, `${w}.cls_threshold`) ?? 0.5,
      examples,
      prompt: optStr(c.prompt, `${w}.prompt`),
      classAct: act,
    });
  });
  const tasks = new Set<string>();
  return out.filter((c) => (tasks.has(c.task) ? false : (tasks.add(c.task), true)));
}

export function normalizeSchema(input: unknown): Schema {
  if (input === undefined || input === null) throw new SchemaError('schema is required for encoder models');
  if (Array.isArray(input)) {
    if (!input.every((x) => typeof x === 'string' || isObj(x))) throw new SchemaError('a schema array must list entity labels');
    const entities = parseEntities(input, '/schema');
    if (entities.length === 0) throw new SchemaError('schema has no entity labels');
    return { entities, structures: [], relations: [], classifications: [] };
  }
  if (!isObj(input)) throw new SchemaError('schema must be an array of entity labels or an object');
  const known = new Set(['entities', 'classifications', 'structures', 'relations']);
  for (const k of Object.keys(input)) if (!known.has(k)) throw new SchemaError(`schema.${k} is not a known task (entities, classifications, structures, relations)`);
  const s: Schema = {
    entities: input.entities !== undefined && input.entities !== null
      ? parseEntities(input.entities, '/schema/entities')
      : undefined,
    structures: input.structures !== undefined && input.structures !== null ? parseStructures(input.structures) : [],
    relations: input.relations !== undefined && input.relations !== null ? parseRelations(input.relations) : [],
    classifications: input.classifications !== undefined && input.classifications !== null ? parseClassifications(input.classifications) : [],
  };
  if (s.entities && s.entities.length === 0) s.entities = undefined;
  const tasks = s.structures.length + s.relations.length + s.classifications.length;
  cap(tasks, 'tasks', '/schema', 'the number of structures, relations and classifications');
  if (!s.entities && !s.structures.length && !s.relations.length && !s.classifications.length)
    throw new SchemaError('schema has no tasks (give entities, classifications, structures or relations)');
  return s;
}

/**
 * Checks a raw schema (the request's `schema`) against ENCODER_LIMITS only: throws InputLimitError
 * with the path into that schema; any other problem is left to normalizeSchema where it runs.
 */
export function checkSchemaLimits(input: unknown): void {
  try {
    normalizeSchema(input);
  } catch (e) {
    if (e instanceof InputLimitError) throw e;
  }
}
