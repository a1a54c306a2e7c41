// Dataset records: parsing, format detection, validation and conversion.
//
// Accepted inputs (JSONL, one object per line, or CSV with a header row):
//   ner             {"text", "entities": [{"start", "end", "label", "text"?}]}         (../shared/data/README.md)
//   relations       ner fields + "relations": [{"head", "tail", "label"}] (indices into entities)
//   classification  {"text", "label"} or {"text", "labels": [..]} (multi-label)
//   gliner2         {"input", "output": {entities|classifications|json_structures|relations...}}
//                   (alias {"text", "schema"}), the GLiNER2 training format
//   chat            {"messages": [{"role", "content"}]}
//   dpo             {"prompt", "chosen", "rejected"}
//   grpo            {"prompt", "answer"}
// CSV columns: text,label (classification); prompt,chosen,rejected (dpo); prompt,answer (grpo);
// text,entities (entities as a JSON string). Every problem is reported with its line number.

export type RecordKind = 'ner' | 'relations' | 'classification' | 'gliner2' | 'chat' | 'dpo' | 'grpo';

export interface Span {
  start: number;
  end: number;
  label: string;
  text: string;
}
export interface NerRecord {
  kind: 'ner';
  text: string;
  entities: Span[];
}
export interface RelationRecord {
  kind: 'relations';
  text: string;
  entities: Span[];
  relations: { head: number; tail: number; label: string }[];
}
export interface ClassificationRecord {
  kind: 'classification';
  text: string;
  labels: string[];
  multiLabel: boolean;
}
export interface Gliner2Record {
  kind: 'gliner2';
  text: string;
  output: Record<string, unknown>;
}
export interface ChatMessageRecord {
  role: 'system' | 'user' | 'assistant' | 'tool' | 'developer';
  content: string;
}
export interface ChatRecord {
  kind: 'chat';
  messages: ChatMessageRecord[];
}
export interface DpoRecord {
  kind: 'dpo';
  prompt: string | ChatMessageRecord[];
  chosen: string;
  rejected: string;
}
export interface GrpoRecord {
  kind: 'grpo';
  prompt: string | ChatMessageRecord[];
  answer: string;
}
export type DataRecord = NerRecord | RelationRecord | ClassificationRecord | Gliner2Record | ChatRecord | DpoRecord | GrpoRecord;

/** A problem with one line of an input file. `line` is 1-based (CSV: the header is line 1). */
export class DatasetFormatError extends Error {
  constructor(readonly line: number, readonly problem: string) {
    super(`line ${line}: ${problem}`);
  }
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer']);

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Detects the format of one parsed object (null when it matches none). */
export function detectKind(o: Record<string, unknown>): RecordKind | null {
  if (Array.isArray(o.messages)) return 'chat';
  if ('chosen' in o && 'rejected' in o) return 'dpo';
  if ('prompt' in o && 'answer' in o) return 'grpo';
  if ('input' in o && 'output' in o) return 'gliner2';
  if (typeof o.text === 'string' && isObj(o.schema)) return 'gliner2';
  if (typeof o.text === 'string' && Array.isArray(o.entities)) return Array.isArray(o.relations) ? 'relations' : 'ner';
  if (typeof o.text === 'string' && ('label' in o || 'labels' in o)) return 'classification';
  return null;
}

function str(o: Record<string, unknown>, key: string, line: number): string {
  const v = o[key];
  if (typeof v !== 'string') throw new DatasetFormatError(line, `"${key}" must be a string`);
  return v;
}

function parsePrompt(v: unknown, line: number): string | ChatMessageRecord[] {
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return parseMessages(v, line, 'prompt');
  throw new DatasetFormatError(line, '"prompt" must be a string or a list of messages');
}

function parseMessages(v: unknown[], line: number, key = 'messages'): ChatMessageRecord[] {
  if (v.length === 0) throw new DatasetFormatError(line, `"${key}" is empty`);
  return v.map((m, i) => {
    if (!isObj(m)) throw new DatasetFormatError(line, `${key}[${i}] must be an object`);
    if (typeof m.role !== 'string' || !ROLES.has(m.role))
      throw new DatasetFormatError(line, `${key}[${i}].role must be one of ${[...ROLES].join(', ')}`);
    if (typeof m.content !== 'string') throw new DatasetFormatError(line, `${key}[${i}].content must be a string`);
    return { role: m.role as ChatMessageRecord['role'], content: m.content };
  });
}

// Maps Unicode code-point offsets (Python's str indexing) to UTF-16 offsets (JavaScript's).
function codePointToUtf16(text: string): (cp: number) => number {
  const map: number[] = [];
  let u = 0;
  for (const ch of text) {
    map.push(u);
    u += ch.length;
  }
  map.push(u);
  return (cp) => (cp >= 0 && cp < map.length ? map[cp] : -1);
}

// Entity offsets are stored as UTF-16 code units (JavaScript string indices), the unit the API
// returns. Files written by Python tools count Unicode code points instead; the two differ only
// after an astral character (emoji). A record whose offsets match its entity texts only as code
// points is converted; without entity texts to check, offsets in a text with astral characters
// are read as code points (the convention of the datasets this project ships).
function parseSpans(text: string, v: unknown[], line: number): Span[] {
  const raw = v.map((e, i) => {
    if (!isObj(e)) throw new DatasetFormatError(line, `entities[${i}] must be an object`);
    const { start, end, label } = e;
    if (!Number.isInteger(start) || !Number.isInteger(end))
      throw new DatasetFormatError(line, `entities[${i}] needs integer "start" and "end"`);
    if (typeof label !== 'string' || !label.trim()) throw new DatasetFormatError(line, `entities[${i}].label must be a non-empty string`);
    if (e.text !== undefined && typeof e.text !== 'string') throw new DatasetFormatError(line, `entities[${i}].text must be a string`);
    return { start: start as number, end: end as number, label, text: e.text as string | undefined };
  });
  const astral = /[\uD800-\uDBFF]/.test(text);
  let conv: ((cp: number) => number) | null = null;
  if (astral) {
    const utf16Ok = raw.every((e) => e.text === undefined || text.slice(e.start, e.end) === e.text);
    const anyText = raw.some((e) => e.text !== undefined);
    if (!utf16Ok || !anyText) conv = codePointToUtf16(text);
  }
  return raw.map((e, i) => {
    const s = conv ? conv(e.start) : e.start;
    const en = conv ? conv(e.end) : e.end;
    if (s < 0 || en < 0 || en > text.length || s >= en)
      throw new DatasetFormatError(line, `entities[${i}] span [${e.start}, ${e.end}) is outside the text (length ${text.length}) or empty`);
    const covered = text.slice(s, en);
    if (e.text !== undefined && e.text !== covered)
      throw new DatasetFormatError(line, `entities[${i}].text ${JSON.stringify(e.text)} does not match text[${e.start}:${e.end}] = ${JSON.stringify(covered)}`);
    return { start: s, end: en, label: e.label, text: covered };
  });
}

/** Validates one parsed object and returns the typed record. */
export function toRecord(o: unknown, line: number, expect?: RecordKind[]): DataRecord {
  if (!isObj(o)) throw new DatasetFormatError(line, 'expected a JSON object');
  const kind = detectKind(o);
  if (!kind)
    throw new DatasetFormatError(line, 'unrecognized record: expected one of {text, entities}, {text, label}, {input, output}, {messages}, {prompt, chosen, rejected}, {prompt, answer}');
  if (expect && !expect.includes(kind))
    throw new DatasetFormatError(line, `a ${kind} record is not valid here (expected ${expect.join(' or ')})`);
  switch (kind) {
    case 'chat':
      return { kind, messages: parseMessages(o.messages as unknown[], line) };
    case 'dpo':
      return { kind, prompt: parsePrompt(o.prompt, line), chosen: str(o, 'chosen', line), rejected: str(o, 'rejected', line) };
    case 'grpo':
      return { kind, prompt: parsePrompt(o.prompt, line), answer: String(o.answer ?? '') };
    case 'gliner2': {
      const text = typeof o.input === 'string' ? o.input : o.text;
      const output = isObj(o.output) ? o.output : o.schema;
      if (typeof text !== 'string') throw new DatasetFormatError(line, '"input" must be a string');
      if (!isObj(output)) throw new DatasetFormatError(line, '"output" must be an object');
      return { kind, text, output };
    }
    case 'ner':
    case 'relations': {
      const text = str(o, 'text', line);
      const entities = parseSpans(text, o.entities as unknown[], line);
      if (kind === 'ner') return { kind, text, entities };
      const relations = (o.relations as unknown[]).map((r, i) => {
        if (!isObj(r) || !Number.isInteger(r.head) || !Number.isInteger(r.tail) || typeof r.label !== 'string')
          throw new DatasetFormatError(line, `relations[${i}] needs integer "head", "tail" and a string "label"`);
        const h = r.head as number, t = r.tail as number;
        if (h < 0 || h >= entities.length || t < 0 || t >= entities.length)
          throw new DatasetFormatError(line, `relations[${i}] refers to entity ${h < 0 || h >= entities.length ? h : t}, but there are ${entities.length}`);
        return { head: h, tail: t, label: r.label };
      });
      return { kind, text, entities, relations };
    }
    case 'classification': {
      const text = str(o, 'text', line);
      const raw = o.labels ?? o.label;
      const labels = Array.isArray(raw) ? raw : [raw];
      if (labels.length === 0 || !labels.every((l) => typeof l === 'string' && l.length > 0))
        throw new DatasetFormatError(line, '"label" must be a non-empty string (or "labels" a list of them)');
      return { kind, text, labels: labels as string[], multiLabel: Array.isArray(raw) };
    }
  }
}

/** Parses JSONL text. Blank lines are skipped. Throws DatasetFormatError on the first bad line. */
export function parseJsonl(content: string, expect?: RecordKind[]): DataRecord[] {
  const out: DataRecord[] = [];
  const lines = content.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i].trim();
    if (!l) continue;
    let o: unknown;
    try {
      o = JSON.parse(l);
    } catch (e) {
      throw new DatasetFormatError(i + 1, `invalid JSON (${(e as Error).message})`);
    }
    out.push(toRecord(o, i + 1, expect));
  }
  return out;
}

/** Parses CSV with a header row (RFC 4180 quoting). JSON-valued columns (entities, relations, messages, labels) are decoded. */
export async function parseCsv(content: string, expect?: RecordKind[]): Promise<DataRecord[]> {
  const { parse } = await import('csv-parse/sync');
  let rows: string[][];
  try {
    rows = parse(content, { relax_column_count: false, skip_empty_lines: true, bom: true }) as string[][];
  } catch (e) {
    const err = e as { lines?: number; message: string };
    throw new DatasetFormatError(err.lines ?? 1, `invalid CSV (${err.message})`);
  }
  if (rows.length === 0) return [];
  const header = rows[0].map((h) => h.trim());
  const jsonCols = new Set(['entities', 'relations', 'messages', 'labels', 'output', 'schema']);
  const out: DataRecord[] = [];
  for (let r = 1; r < rows.length; r++) {
    const o: Record<string, unknown> = {};
    header.forEach((h, c) => {
      const v = rows[r][c];
      if (jsonCols.has(h) && v !== undefined && v !== '') {
        try {
          o[h] = JSON.parse(v);
        } catch {
          throw new DatasetFormatError(r + 1, `column "${h}" must hold JSON`);
        }
      } else o[h] = v;
    });
    out.push(toRecord(o, r + 1, expect));
  }
  return out;
}

/** Which record kinds each dataset_type accepts. */
export const DATASET_TYPE_KINDS: Record<'ner' | 'classification' | 'decoder' | 'custom', RecordKind[]> = {
  ner: ['ner', 'relations', 'gliner2'],
  classification: ['classification', 'gliner2'],
  decoder: ['chat', 'dpo', 'grpo'],
  custom: ['ner', 'relations', 'classification', 'gliner2', 'chat', 'dpo', 'grpo'],
};

/** Serializes a record back to the canonical JSONL object (what downloads and previews show). */
export function recordToJson(r: DataRecord): Record<string, unknown> {
  switch (r.kind) {
    case 'ner':
      return { text: r.text, entities: r.entities };
    case 'relations':
      return { text: r.text, entities: r.entities, relations: r.relations };
    case 'classification':
      return r.multiLabel ? { text: r.text, labels: r.labels } : { text: r.text, label: r.labels[0] };
    case 'gliner2':
      return { input: r.text, output: r.output };
    case 'chat':
      return { messages: r.messages };
    case 'dpo':
      return { prompt: r.prompt, chosen: r.chosen, rejected: r.rejected };
    case 'grpo':
      return { prompt: r.prompt, answer: r.answer };
  }
}
