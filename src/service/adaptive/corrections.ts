// A correction (POST /inferences/:id/feedback, verdict `incorrect`) → one labeled example in the
// task's training format (src/training/data/formats.ts), checked against the inference's own schema:
//   entities only          {text, entities: [{start, end, label, text}]}        (ner, character spans)
//   any other encoder task {input, output: {entities, classifications, relations, json_structures}}
//                          (the GLiNER2 training format; entity mentions as strings)
//   decoder                {messages: [...the conversation, {role: 'assistant', content}]}
// The corrected output has the shape of the model's output. An entity is `{text, start, end}` (the
// span must cover `text`), `{text}` or a string (located in the input: the first occurrence not
// already taken, exact case first); a class is a label or `{label}`; a relation is `{head, tail}`
// (entities as above). Anything that does not fit throws a ValidationError naming its JSON pointer.
import { normalizeSchema, type Schema, SchemaError } from '../../models/encoder/schema.ts';
import type { InferenceRecord } from '../../store/index.ts';
import { ValidationError } from '../errors.ts';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const ptr = (base: string, key: string | number) => `${base}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`;
const ROOT = '/corrected_output';

function bad(path: string, message: string): never {
  throw new ValidationError(
    `corrected_output does not fit the inference: ${path.slice(ROOT.length + 1) || 'root'} ${message}`,
    [{ path, message, keyword: 'correction' }],
  );
}

interface Span {
  start: number;
  end: number;
  text: string;
}

/** locates entities in one text; spans already taken are skipped for repeated mentions */
function spanFinder(text: string) {
  const taken: Span[] = [];
  const free = (s: number, e: number) => !taken.some((t) => t.start === s && t.end === e);
  function find(m: string): Span | null {
    for (const hay of [text, text.toLowerCase()]) {
      const needle = hay === text ? m : m.toLowerCase();
      for (let i = hay.indexOf(needle); i >= 0; i = hay.indexOf(needle, i + 1)) {
        if (free(i, i + m.length)) return { start: i, end: i + m.length, text: text.slice(i, i + m.length) };
      }
    }
    return null;
  }
  return function span(v: unknown, at: string): Span {
    let s: Span | null;
    if (typeof v === 'string') {
      if (!v.trim()) bad(at, 'must be a non-empty mention');
      s = find(v);
      if (!s) bad(at, `${JSON.stringify(v)} does not occur in the input text`);
    } else if (isObj(v)) {
      const { start, end } = v;
      const t = v.text;
      if (t !== undefined && (typeof t !== 'string' || !t.trim())) bad(ptr(at, 'text'), 'must be a non-empty string');
      if (start === undefined && end === undefined) {
        if (t === undefined) bad(at, 'needs "text" (and optionally "start" and "end")');
        s = find(t as string);
        if (!s) bad(ptr(at, 'text'), `${JSON.stringify(t)} does not occur in the input text`);
      } else {
        if (!Number.isInteger(start)) bad(ptr(at, 'start'), 'must be an integer');
        if (!Number.isInteger(end)) bad(ptr(at, 'end'), 'must be an integer');
        const a = start as number,
          b = end as number;
        if (a < 0 || b > text.length || a >= b)
          bad(at, `span [${a}, ${b}) is outside the text (length ${text.length}) or empty`);
        if (t !== undefined && text.slice(a, b) !== t) {
          bad(
            ptr(at, 'text'),
            `${JSON.stringify(t)} does not match text[${a}:${b}] = ${JSON.stringify(text.slice(a, b))}`,
          );
        }
        s = { start: a, end: b, text: text.slice(a, b) };
      }
    } else {
      bad(at, 'must be a mention: a string or {text, start?, end?}');
    }
    taken.push(s);
    return s;
  };
}

const tasksOf = (s: Schema) => s.classifications.map((x) => x.task).join(', ');
const relationsOf = (s: Schema) => s.relations.map((r) => r.name).join(', ');
const many = (v: unknown): unknown[] => (v === null || v === undefined ? [] : Array.isArray(v) ? v : [v]);

function encoderRecord(text: string, schema: Schema, c: Obj): Obj {
  const span = spanFinder(text);
  for (const k of Object.keys(c)) {
    if (!['entities', 'classifications', 'structures', 'relations'].includes(k))
      bad(ptr(ROOT, k), 'is not a task of an encoder output');
  }
  // entities: label → spans
  const ents: Array<Span & { label: string }> = [];
  if (c.entities !== undefined) {
    const at = ptr(ROOT, 'entities');
    if (!isObj(c.entities)) bad(at, 'must be an object mapping entity types to mentions');
    const names = new Set(schema.entities?.map((e) => e.name) ?? []);
    for (const [label, v] of Object.entries(c.entities)) {
      if (!names.has(label))
        bad(ptr(at, label), `is not an entity type of the inference's schema (${[...names].join(', ') || 'none'})`);
      many(v).forEach((m, i) =>
        ents.push({ ...span(m, Array.isArray(v) ? ptr(ptr(at, label), i) : ptr(at, label)), label }),
      );
    }
  }
  const classes: Array<{ task: string; labels: string[]; true_label: string | string[]; multi_label: boolean }> = [];
  if (c.classifications !== undefined) {
    const at = ptr(ROOT, 'classifications');
    if (!isObj(c.classifications)) bad(at, 'must be an object mapping classification tasks to labels');
    for (const [task, v] of Object.entries(c.classifications)) {
      const spec = schema.classifications.find((x) => x.task === task);
      if (!spec)
        bad(
          ptr(at, task),
          `is not a classification task of the inference's schema (${tasksOf(schema) || 'none'})`,
        );
      const labels = many(v).map((l, i) => {
        const p = Array.isArray(v) ? ptr(ptr(at, task), i) : ptr(at, task);
        const label = isObj(l) ? l.label : l;
        if (typeof label !== 'string' || !spec.labels.includes(label))
          bad(p, `must be one of the task's labels (${spec.labels.join(', ')})`);
        return label;
      });
      if (!labels.length) bad(ptr(at, task), 'must name at least one label');
      if (labels.length > 1 && !spec.multiLabel)
        bad(ptr(at, task), 'names several labels, but the task is single-label');
      classes.push({
        task,
        labels: spec.labels.slice(),
        true_label: spec.multiLabel ? labels : labels[0],
        multi_label: spec.multiLabel,
      });
    }
  }
  const relations: Array<Record<string, { head: string; tail: string }>> = [];
  if (c.relations !== undefined) {
    const at = ptr(ROOT, 'relations');
    if (!isObj(c.relations)) bad(at, 'must be an object mapping relation types to {head, tail} pairs');
    for (const [name, v] of Object.entries(c.relations)) {
      if (!schema.relations.some((r) => r.name === name))
        bad(
          ptr(at, name),
          `is not a relation type of the inference's schema (${relationsOf(schema) || 'none'})`,
        );
      many(v).forEach((pair, i) => {
        const p = ptr(ptr(at, name), i);
        if (!isObj(pair)) bad(p, 'must be {head, tail}');
        const sp = spanFinder(text);
        relations.push({
          [name]: { head: sp(pair.head, ptr(p, 'head')).text, tail: sp(pair.tail, ptr(p, 'tail')).text },
        });
      });
    }
  }
  type FieldValue = string | string[] | { value: string | string[]; choices: string[] };
  const structures: Array<Record<string, Record<string, FieldValue>>> = [];
  if (c.structures !== undefined) {
    const at = ptr(ROOT, 'structures');
    if (!isObj(c.structures)) bad(at, 'must be an object mapping structure names to instances');
    for (const [name, v] of Object.entries(c.structures)) {
      const spec = schema.structures.find((s) => s.name === name);
      if (!spec)
        bad(
          ptr(at, name),
          `is not a structure of the inference's schema (${schema.structures.map((s) => s.name).join(', ') || 'none'})`,
        );
      many(v).forEach((inst, i) => {
        const p = ptr(ptr(at, name), i);
        if (!isObj(inst)) bad(p, 'must be an object of field values');
        const fields: Record<string, FieldValue> = {};
        for (const [f, fv] of Object.entries(inst)) {
          const fs = spec.fields.find((x) => x.name === f);
          if (!fs) bad(ptr(p, f), `is not a field of structure ${name} (${spec.fields.map((x) => x.name).join(', ')})`);
          const vals = many(fv).map((x, j) => {
            const fp = Array.isArray(fv) ? ptr(ptr(p, f), j) : ptr(p, f);
            const s = isObj(x) ? x.text : x;
            if (typeof s !== 'string') bad(fp, 'must be a string or {text}');
            if (fs.choices ? !fs.choices.includes(s) : !text.includes(s)) {
              bad(
                fp,
                fs.choices
                  ? `must be one of ${fs.choices.join(', ')}`
                  : `${JSON.stringify(s)} does not occur in the input text`,
              );
            }
            return s;
          });
          const value = fs.dtype === 'list' ? vals : (vals[0] ?? '');
          // a choice field in the GLiNER2 training format ({value, choices}: trained on the choice prefix)
          fields[f] = fs.choices ? { value, choices: fs.choices.slice() } : value;
        }
        structures.push({ [name]: fields });
      });
    }
  }
  if (!classes.length && !relations.length && !structures.length) {
    // entities only: character spans, the ner format
    if (!schema.entities) bad(ROOT, "has no task of the inference's schema");
    ents.sort((a, b) => a.start - b.start || a.end - b.end);
    return { text, entities: ents.map((e) => ({ start: e.start, end: e.end, label: e.label, text: e.text })) };
  }
  const output: Obj = {};
  if (schema.entities) {
    const byLabel: Record<string, string[]> = Object.fromEntries(schema.entities.map((e) => [e.name, []]));
    for (const e of ents) byLabel[e.label]!.push(e.text);
    output.entities = byLabel;
  }
  if (classes.length) output.classifications = classes;
  if (relations.length) output.relations = relations;
  if (structures.length) output.json_structures = structures;
  return { input: text, output };
}

function decoderRecord(r: InferenceRecord, c: Obj): Obj {
  for (const k of Object.keys(c))
    if (k !== 'content' && k !== 'finish_reason') bad(ptr(ROOT, k), 'is not a field of a decoder output (content)');
  if (typeof c.content !== 'string' || !c.content.trim())
    bad(ptr(ROOT, 'content'), 'must be the corrected reply (a non-empty string)');
  const msgs = Array.isArray(r.input?.messages)
    ? (r.input!.messages as Array<{ role?: unknown; content?: unknown }>)
    : null;
  const prompt =
    msgs?.map((m) => ({
      role: String(m.role),
      content: typeof m.content === 'string' ? m.content : JSON.stringify(m.content),
    })) ?? (typeof r.input?.prompt === 'string' ? [{ role: 'user', content: r.input.prompt }] : null);
  if (!prompt?.length) bad(ROOT, 'cannot become an example: the inference has no stored conversation');
  return { messages: [...prompt, { role: 'assistant', content: c.content }] };
}

/**
 * The training record of a correction of inference `r`; throws a 422 naming the path that does not
 * fit. Inferences stored without content (store: false) and batch inferences cannot be corrected.
 */
export function correctionRecord(r: InferenceRecord, corrected: Obj): Obj {
  if (!r.stored_content || !r.input)
    bad(ROOT, 'cannot become an example: the inference was made with store: false, so its input was not kept');
  if (r.type === 'decoder') return decoderRecord(r, corrected);
  if (typeof r.input.text !== 'string')
    bad(ROOT, 'cannot correct a batch inference: send one text per inference to correct it');
  let schema: Schema;
  try {
    schema = normalizeSchema(r.schema);
  } catch (e) {
    if (e instanceof SchemaError) bad(ROOT, `cannot be checked: the inference's schema is invalid (${e.message})`);
    throw e;
  }
  return encoderRecord(r.input.text, schema, corrected);
}
