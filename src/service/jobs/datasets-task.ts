// Dataset processing (runs in the customization worker pool): converting (parse JSONL or CSV into
// typed records, line by line) → validating (every record fits the dataset type, the dataset is
// usable for training) → the canonical JSONL written next to the upload. Every problem names the
// line it is on.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { MessagePort } from 'node:worker_threads';
import { DATASET_TYPE_KINDS, DatasetFormatError, type DataRecord, parseCsv, recordToJson, toRecord } from '../../training/data/formats.ts';

export interface ProcessDatasetTask {
  op: 'process_dataset';
  raw_path: string;
  out_path: string;
  filename: string;
  dataset_type: keyof typeof DATASET_TYPE_KINDS;
  port?: MessagePort;
}

export type ProcessDatasetResult =
  | { ok: true; format: 'jsonl' | 'csv'; size: number; kinds: Record<string, number>; labels: Record<string, number> }
  | { ok: false; stage: 'converting' | 'validating'; error: string };

const TYPE_WORDS: Record<string, string> = { ner: 'an ner', classification: 'a classification', decoder: 'a decoder', custom: 'a custom' };

function detectFormat(filename: string, text: string): 'jsonl' | 'csv' {
  const f = filename.toLowerCase();
  if (f.endsWith('.csv')) return 'csv';
  if (f.endsWith('.jsonl') || f.endsWith('.ndjson') || f.endsWith('.json')) return 'jsonl';
  return text.trimStart().startsWith('{') ? 'jsonl' : 'csv';
}

/** JSONL with the source line of every record. */
function parseJsonlLines(text: string): { records: DataRecord[]; lines: number[] } {
  const records: DataRecord[] = [];
  const lines: number[] = [];
  const src = text.split(/\r?\n/);
  for (let i = 0; i < src.length; i++) {
    const l = src[i].trim();
    if (!l) continue;
    let o: unknown;
    try { o = JSON.parse(l); } catch (e) { throw new DatasetFormatError(i + 1, `invalid JSON (${(e as Error).message})`); }
    records.push(toRecord(o, i + 1));
    lines.push(i + 1);
  }
  return { records, lines };
}

function labelsOf(r: DataRecord, into: Record<string, number>): void {
  const add = (l: string) => { into[l] = (into[l] ?? 0) + 1; };
  switch (r.kind) {
    case 'ner': case 'relations': r.entities.forEach((e) => add(e.label)); break;
    case 'classification': r.labels.forEach(add); break;
    case 'gliner2': {
      const ents = r.output.entities;
      if (ents && typeof ents === 'object') for (const [k, v] of Object.entries(ents)) if (!Array.isArray(v) || v.length) add(k);
      const cls = r.output.classifications;
      if (Array.isArray(cls)) for (const c of cls as Array<{ true_label?: unknown }>) for (const l of [c?.true_label].flat()) if (typeof l === 'string') add(l);
      break;
    }
    default: break;
  }
}

export async function processDataset(t: ProcessDatasetTask): Promise<ProcessDatasetResult> {
  const phase = (p: string) => t.port?.postMessage({ phase: p });
  // converting
  let records: DataRecord[];
  let lines: number[];
  let format: 'jsonl' | 'csv';
  try {
    const buf = readFileSync(t.raw_path);
    let text: string;
    try { text = new TextDecoder('utf-8', { fatal: true }).decode(buf); } catch { return { ok: false, stage: 'converting', error: 'the file is not valid UTF-8 text' }; }
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    format = detectFormat(t.filename, text);
    if (format === 'jsonl') ({ records, lines } = parseJsonlLines(text));
    else {
      records = await parseCsv(text);
      lines = records.map((_, i) => i + 2); // the header is line 1
    }
  } catch (e) {
    if (e instanceof DatasetFormatError) return { ok: false, stage: 'converting', error: e.message };
    return { ok: false, stage: 'converting', error: (e as Error).message };
  }
  phase('validating');
  // validating
  if (records.length === 0) return { ok: false, stage: 'validating', error: 'the file holds no records' };
  const allowed = DATASET_TYPE_KINDS[t.dataset_type];
  const kinds: Record<string, number> = {};
  const labels: Record<string, number> = {};
  for (let i = 0; i < records.length; i++) {
    const r = records[i];
    if (!allowed.includes(r.kind)) {
      return { ok: false, stage: 'validating', error: `line ${lines[i]}: a ${r.kind} record is not valid in ${TYPE_WORDS[t.dataset_type]} dataset (expected ${allowed.join(', ')})` };
    }
    if (r.kind === 'chat' && !r.messages.some((m) => m.role === 'assistant')) {
      return { ok: false, stage: 'validating', error: `line ${lines[i]}: "messages" has no assistant message to learn from` };
    }
    if ((r.kind === 'ner' || r.kind === 'classification' || r.kind === 'relations') && !r.text.trim()) {
      return { ok: false, stage: 'validating', error: `line ${lines[i]}: "text" is empty` };
    }
    kinds[r.kind] = (kinds[r.kind] ?? 0) + 1;
    labelsOf(r, labels);
  }
  if (t.dataset_type === 'ner' && Object.keys(labels).length === 0) return { ok: false, stage: 'validating', error: 'no record has an entity annotation: an NER dataset needs labeled spans' };
  if (t.dataset_type === 'classification' && (kinds.classification ?? 0) > 0 && Object.keys(labels).length < 2) {
    return { ok: false, stage: 'validating', error: `a classification dataset needs at least two classes (found ${Object.keys(labels).join(', ') || 'none'})` };
  }
  const out = records.map((r) => JSON.stringify(recordToJson(r))).join('\n') + '\n';
  writeFileSync(t.out_path + '.tmp', out);
  renameSync(t.out_path + '.tmp', t.out_path);
  return { ok: true, format, size: records.length, kinds, labels };
}
