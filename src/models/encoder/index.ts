// Encoder runtime (GLiNER2 span checkpoints) — the public API the service calls.
//
//   import { loadEncoder } from 'loom/src/models/encoder/index.ts';
//   const model = await loadEncoder('/models/gliner2-base-v1', { dtype: 'f32' });   // or 'bf16'
//   const r = await model.extract('Tim Cook leads Apple.', ['person', 'company']);
//   // → { entities: { person: [{ text: 'Tim Cook', confidence: 0.93, start: 0, end: 8 }], company: [...] } }
//   const rs = await model.extract(['text 1', 'text 2'], schema, { threshold: 0.4 });  // one result per text
//   const vecs = await model.embed(['a sentence', 'another']);                       // Float32Array[] (mean-pooled)
//   model.info  // { backbone, countingLayer, hiddenSize, layers, heads, vocabSize, maxWidth, dtype, parameters, ... }
//
// loadEncoder(dir, opts) reads a GLiNER2 span checkpoint directory: config.json,
// encoder_config/config.json, model.safetensors (mmap'd), tokenizer.json. The counting layer
// (count_lstm / count_lstm_v2) is detected from the state-dict keys. opts.dtype 'bf16' keeps the
// encoder's weights in bf16 (fp32 compute; half the memory traffic).
//
// model.extract(text | text[], schema, { threshold = 0.5, include_confidence = true,
//   include_spans = true, format = 'loom' | 'gliner2', batchSize = 32, chunkWords = 384 })
//   (windows also stop at ENCODER_LIMITS.windowTokens tokens; words over wordChars are split)
//   schema: the service's schema (spec §4 POST /inference): a flat string array of entity labels, or
//   { entities, classifications, structures, relations } (see schema.ts for every accepted form).
//   Result (stable format, keys only for tasks in the schema; offsets are UTF-16 indices into the
//   caller's string, end exclusive):
//   { entities:        { <label>: [ {text, confidence, start, end} ] },
//     classifications: { <task>: {label, confidence} | [ {label, confidence} ] (multi_label) },
//     structures:      { <name>: [ { <field>: {text, confidence, start, end} | null | [ ... ] } ] },
//     relations:       { <relation>: [ { head: {...}, tail: {...} } ] } }
//   include_confidence / include_spans false drop those members. Batches are padded and
//   length-bucketed; texts longer than chunkWords words are run in overlapping windows and merged.
//   format 'gliner2' returns the reference library's JSON exactly (code-point offsets, its quirks).
// model.extractMany([{text, schema}], opts) runs texts with different schemas in one batch.
// Errors: SchemaError (bad schema → 422 in the service), InputLimitError (an input over
// ENCODER_LIMITS, limits.ts: path + limit name → 422), EncoderConfigError (bad checkpoint),
// RangeError/TypeError (bad arguments). All heavy work runs off the event loop (N-API async work).
import { Gliner2Model, type LoadOptions } from './gliner2.ts';

export { Gliner2Model } from './gliner2.ts';
export type { ExtractOptions, LoadOptions, ModelInfo, CountingLayer } from './gliner2.ts';
export type { ExtractResult, EntityOut, LabelOut, ChoiceOut } from './decode.ts';
export { SchemaError, normalizeSchema } from './schema.ts';
export type { Schema, SchemaInput } from './schema.ts';
export { EncoderConfigError } from './deberta.ts';
export { ENCODER_LIMITS, InputLimitError } from './limits.ts';

export type EncoderModel = Gliner2Model;

export function loadEncoder(dir: string, opts: LoadOptions = {}): Promise<EncoderModel> {
  return Gliner2Model.load(dir, opts);
}
