// Tokenizers embedded in GGUF files (llama.cpp's `tokenizer.ggml.*` metadata), rebuilt as a Hugging Face
// tokenizer.json (plus the tokenizer_config.json / generation_config.json fields Loom reads), so a GGUF file
// without a tokenizer.json beside it loads through the same path as a model folder (Tokenizer.fromJson: the
// `tokenizers` package and Loom's synchronous BPE pipeline).
//
// llama.cpp's token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Unknown and
// control tokens become special added tokens (matched in the text before the model runs, dropped by
// decode(skipSpecialTokens)); user-defined tokens become non-special added tokens (also never split, but kept
// in decoded text, as transformers does for added tokens with special=false and llama.cpp for user-defined
// ones); unused tokens (e.g. the [PAD151665] rows a converter adds up to the embedding size) are left out, so
// they decode to nothing as in transformers.
//
// tokenizer.ggml.model:
//  - "gpt2" (byte-level BPE): tokens are byte-level strings ("Ġthe"), tokenizer.ggml.merges the ranked merges.
//    llama.cpp hard-codes a pre-tokenizer regex per `tokenizer.ggml.pre` name; each name below maps to the
//    tokenizer.json pre_tokenizer that splits the same way: the GPT-2 regex (ByteLevel use_regex), the
//    Llama 3 regex (Split + ByteLevel; "llama-bpe" and its aliases also ignore merges for whole-word vocabulary
//    hits, like llama.cpp and Llama 3's tokenizer.json), the Qwen2 regex, or Digits(individual) + GPT-2 regex
//    ("smollm", "starcoder", ...). Other names (and "default") fall back to the GPT-2 regex with a note: text
//    may then split differently from the model's own tokenizer. "qwen2" also gets Qwen2's NFC normalizer, which
//    GGUF cannot express and llama.cpp does not apply (so NFD input tokenizes as transformers does, not as
//    llama.cpp does).
//  - "llama" (SentencePiece): the shape of transformers' LlamaConverter (legacy): BPE with byte_fallback over
//    `<0xXX>` byte tokens, normalizer Prepend("▁") + Replace(" ", "▁") (no Prepend when
//    tokenizer.ggml.add_space_prefix is false), decoder Replace("▁", " ") + ByteFallback + Fuse + Strip(1).
//    Merges: tokenizer.ggml.merges when the file has them (Loom's writer stores them), else derived from the
//    scores as transformers' SentencePieceExtractor and llama.cpp's SPM tokenizer do: every split of a vocabulary
//    piece into two pieces, ordered by the merged piece's score (highest first). llama.cpp merges by score too,
//    so the two agree except on equal scores (transformers: the piece with the lower id first; llama.cpp: the
//    leftmost pair) and on pieces no merge produces in the original tokenizer.
//  - anything else ("bert", "t5", "rwkv", ...): a GgufError naming the model type.
//
// Added tokens get normalized=false. A tokenizer.json whose added tokens are normalized (TinyStories'
// <|start_story|>) matches them after the "▁" prefix is added, so text right after such a token gets no "▁";
// here, as in llama.cpp, the text after any special token starts a new segment with its own "▁". Likewise
// Metaspace prepend_scheme "first" (Mistral v0.3) cannot be expressed: the prefix is added to every segment.
//
// Special tokens: bos/eos/unk/pad from their ids (SentencePiece files without the keys get llama.cpp's
// defaults 1/2/0). add_bos_token / add_eos_token decide the post-processor; when the file does not say, the
// defaults are llama.cpp's (SentencePiece and the Llama 3 family add BOS, other byte-level files do not).
// End of generation: eos, eot and eom ids, plus `loom.eos_token_ids` (Loom's writer: every eos id of the HF
// folder); files from other converters also get the tokens llama.cpp treats as end-of-generation by their text
// (<|im_end|>, <|eot_id|>, <|endoftext|>, ...), since llama.cpp users expect generation to stop there.
// Chat templates: tokenizer.chat_template, and named ones (tokenizer.chat_templates + tokenizer.chat_template.NAME)
// as transformers' list form.
//
// The other way (ggufTokenizerMetadata, below: what convertHfToGguf writes):
// Tokenizer: the writer stores tokenizer.ggml.* metadata so llama.cpp can load the file, and so can Loom without
// a tokenizer.json beside it (src/formats/gguf-tokenizer.ts rebuilds one from this metadata). Byte-level BPE is
// model "gpt2" with merges and the pre-tokenizer llama.cpp must use ("qwen2", "llama-bpe", "smollm", "gpt-2"),
// recognised from tokenizer.json's pre_tokenizer; SentencePiece-style BPE is model "llama" with scores that follow
// the merge order (see ggufTokenizerMetadata) and, for Loom, the merges themselves. Also stored: bos/eos/pad/unk
// ids, add_bos_token / add_eos_token as the post-processor does, the chat template(s), and loom.eos_token_ids
// (every eos id of config.json, generation_config.json and tokenizer_config.json).
// Checked with llama.cpp (node-llama-cpp 3.21.1) on the byte-level Qwen2.5 / SmolLM2 / Llama 3 fixtures: same ids. What
// GGUF metadata cannot express, so llama.cpp differs from tokenizer.json there: Qwen2's NFC normalizer (llama.cpp
// tokenizes NFD text as is), and Metaspace prepend_scheme "first" (Mistral v0.3): llama.cpp's SPM path adds a
// "▁" at the start and after every special token even when the text already starts with a space (Loom's
// rebuilt tokenizer does the same; it does apply NFC for "qwen2").
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DecoderConfig } from './hf-config.ts';
import { GgufError, GgufType, gv, type GgufValue } from './gguf.ts';
import { Tokenizer } from '../tokenize/tokenizer.ts';

export enum GgufTokenType { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 }

/** The pieces of a model folder's tokenizer files rebuilt from GGUF metadata. */
export interface GgufTokenizerParts {
  /** A tokenizer.json object. */
  tokenizerJson: Record<string, unknown>;
  /** tokenizer_config.json fields: bos_token, eos_token, pad_token, unk_token, add_bos_token, add_eos_token, chat_template. */
  tokenizerConfig: Record<string, unknown>;
  /** generation_config.json fields: every end-of-generation id, bos and pad ids. */
  generationConfig: { eos_token_id: number[]; bos_token_id: number | null; pad_token_id: number | null };
  /** What the file did not say and was assumed (e.g. an unknown pre-tokenizer name); empty when nothing was. */
  notes: string[];
}

type PreKind = 'gpt2' | 'llama3' | 'qwen2' | 'digits';

/**
 * llama.cpp's pre-tokenizer names (llama-vocab.cpp) grouped by the regex llama.cpp uses for them. `ignoreMerges`
 * and `addBos` are llama.cpp's per-name defaults; `nfc`: the model's own tokenizer.json normalizes to NFC.
 */
const PRE_TOKENIZERS: Record<string, { kind: PreKind; ignoreMerges?: boolean; addBos?: boolean; nfc?: boolean }> = {
  ...Object.fromEntries(
    ['gpt-2', 'phi-2', 'mpt', 'olmo', 'jais', 'jina-es', 'jina-de', 'jina-v2-es', 'jina-v2-de', 'gigachat', 'a.x-4.0', 'mellum', 'trillion', 'exaone4', 'granite-docling']
      .map((n) => [n, { kind: 'gpt2' as const }]),
  ),
  ...Object.fromEntries(
    ['llama3', 'llama-v3', 'llama-bpe', 'falcon3', 'falcon-h1', 'pixtral', 'midm-2.0', 'lfm2'].map((n) => [n, { kind: 'llama3' as const, ignoreMerges: true, addBos: true }]),
  ),
  dbrx: { kind: 'llama3' },
  'smaug-bpe': { kind: 'llama3' },
  qwen2: { kind: 'qwen2', nfc: true },
  'deepseek-r1-qwen': { kind: 'qwen2', nfc: true },
  kormo: { kind: 'qwen2' },
  megrez: { kind: 'qwen2' },
  stablelm2: { kind: 'qwen2' },
  ...Object.fromEntries(['smollm', 'starcoder', 'refact', 'command-r', 'codeshell', 'exaone', 'minerva-7b'].map((n) => [n, { kind: 'digits' as const }])),
};

/** The pre-tokenizer names this module maps exactly (the rest fall back to the GPT-2 regex). */
export const GGUF_PRE_TOKENIZERS: readonly string[] = Object.keys(PRE_TOKENIZERS);

/** Tokens llama.cpp treats as end-of-generation by their text (llama-vocab.cpp), for files from other converters. */
const LLAMA_CPP_EOG_TEXTS = new Set(['<|eot_id|>', '<|im_end|>', '<|end|>', '<|return|>', '<|call|>', '<end_of_turn>', '<|endoftext|>', '<|eom_id|>', '<EOT>', '_<EOT>', '<|end_of_text|>', '<end_of_utterance>']);

const BYTE_TOKEN = /^<0x[0-9A-Fa-f]{2}>$/;

const byteLevel = (useRegex: boolean) => ({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: useRegex });
const split = (regex: string) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false });

function byteLevelPreTokenizer(kind: PreKind): Record<string, unknown> {
  switch (kind) {
    case 'gpt2': return byteLevel(true);
    case 'llama3': return { type: 'Sequence', pretokenizers: [split(LLAMA3_PRE_RE), byteLevel(false)] };
    case 'qwen2': return { type: 'Sequence', pretokenizers: [split(QWEN2_PRE_RE), byteLevel(false)] };
    case 'digits': return { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel(true)] };
  }
}

/** Splits a merge "a b" at the first space after the first character (as llama.cpp does: a token may start with a space). */
function splitMerge(m: string, where: string, rank: number): [string, string] {
  const sp = m.indexOf(' ', 1);
  if (sp < 0) throw new GgufError(`${where}: tokenizer.ggml.merges[${rank}] ${JSON.stringify(m)} is not "left right"`);
  return [m.slice(0, sp), m.slice(sp + 1)];
}

/**
 * SentencePiece merges from scores (transformers' SentencePieceExtractor): for every normal piece, each split into
 * two normal pieces of the vocabulary, ordered by the merged piece's score (highest first; equal scores keep
 * vocabulary order), the splits of one piece by (left id, right id).
 */
export function spmMergesFromScores(tokens: readonly string[], scores: ArrayLike<number>, isNormal: (id: number) => boolean, vocab: ReadonlyMap<string, number>): [string, string][] {
  const found: { a: string; b: string; ia: number; ib: number; id: number }[] = [];
  for (let id = 0; id < tokens.length; id++) {
    if (!isNormal(id)) continue;
    const cps = Array.from(tokens[id]);
    for (let i = 1; i < cps.length; i++) {
      const a = cps.slice(0, i).join(''), b = cps.slice(i).join('');
      const ia = vocab.get(a), ib = vocab.get(b);
      if (ia !== undefined && ib !== undefined && isNormal(ia) && isNormal(ib)) found.push({ a, b, ia, ib, id });
    }
  }
  found.sort((x, y) => scores[y.id] - scores[x.id] || x.id - y.id || x.ia - y.ia || x.ib - y.ib);
  return found.map((m) => [m.a, m.b]);
}

/** Rebuilds tokenizer.json (+ config fields) from GGUF metadata (GgufFile.metadataObject()). `where` names the file in messages. */
export function ggufTokenizerParts(meta: Record<string, unknown>, where = 'GGUF'): GgufTokenizerParts {
  const notes: string[] = [];
  const model = meta['tokenizer.ggml.model'];
  if (model === undefined || model === 'none' || model === 'no_vocab')
    throw new GgufError(`${where}: the file has no embedded vocabulary (tokenizer.ggml.model is ${JSON.stringify(model ?? null)}); put the model's tokenizer.json next to it`);
  if (model !== 'gpt2' && model !== 'llama')
    throw new GgufError(`${where}: GGUF tokenizer model ${JSON.stringify(model)} is not supported (only "gpt2", byte-level BPE, and "llama", SentencePiece); put the model's tokenizer.json next to the file`);
  const spm = model === 'llama';

  const rawTokens = meta['tokenizer.ggml.tokens'];
  if (!Array.isArray(rawTokens) || rawTokens.length === 0 || rawTokens.some((t) => typeof t !== 'string'))
    throw new GgufError(`${where}: tokenizer.ggml.tokens is missing or not a list of strings`);
  const n = rawTokens.length;
  // llama.cpp renames empty tokens the same way (an empty string cannot be a vocabulary key)
  const tokens = (rawTokens as string[]).map((t, i) => (t === '' ? `[EMPTY_${i}]` : t));
  const numList = (key: string): number[] | undefined => {
    const v = meta[key];
    if (v === undefined) return undefined;
    if (!Array.isArray(v) || v.length !== n || v.some((x) => typeof x !== 'number')) throw new GgufError(`${where}: ${key} must be a list of ${n} numbers`);
    return v as number[];
  };
  const rawTypes = numList('tokenizer.ggml.token_type');
  const types = rawTypes ?? tokens.map((t) => (spm && BYTE_TOKEN.test(t) ? GgufTokenType.BYTE : GgufTokenType.NORMAL));
  if (!rawTypes) notes.push('no tokenizer.ggml.token_type: every token is treated as a normal piece (no special tokens are matched in text)');
  const scores = numList('tokenizer.ggml.scores');

  const idKey = (key: string): number | undefined => {
    const v = meta[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= n) {
      notes.push(`${key} = ${JSON.stringify(v)} is not a token id; ignored`);
      return undefined;
    }
    return v;
  };
  // llama.cpp's defaults for SentencePiece files without the keys
  const bos = idKey('tokenizer.ggml.bos_token_id') ?? (spm && n > 1 ? 1 : undefined);
  const eos = idKey('tokenizer.ggml.eos_token_id') ?? (spm && n > 2 ? 2 : undefined);
  const unk = idKey('tokenizer.ggml.unknown_token_id') ?? (spm ? 0 : undefined);
  const pad = idKey('tokenizer.ggml.padding_token_id');

  // vocabulary and added tokens, in id order; duplicates cannot be represented (llama.cpp refuses them too)
  const vocab = new Map<string, number>();
  const added: Record<string, unknown>[] = [];
  let dups = 0;
  for (let id = 0; id < n; id++) {
    const ty = types[id];
    if (ty === GgufTokenType.UNUSED) continue;
    const t = tokens[id];
    if (vocab.has(t)) {
      if (dups++ < 3) notes.push(`token ${JSON.stringify(t)} appears at ids ${vocab.get(t)} and ${id}; id ${id} is left out`);
      continue;
    }
    vocab.set(t, id);
    if (ty === GgufTokenType.UNKNOWN || ty === GgufTokenType.CONTROL || ty === GgufTokenType.USER_DEFINED)
      added.push({ id, content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: ty !== GgufTokenType.USER_DEFINED });
  }
  if (dups > 3) notes.push(`${dups} duplicate tokens in all`);

  // merges
  let merges: [string, string][];
  const rawMerges = meta['tokenizer.ggml.merges'];
  if (rawMerges !== undefined) {
    if (!Array.isArray(rawMerges) || rawMerges.some((m) => typeof m !== 'string')) throw new GgufError(`${where}: tokenizer.ggml.merges must be a list of strings`);
    merges = (rawMerges as string[]).map((m, i) => splitMerge(m, where, i));
  } else if (spm) {
    if (!scores) notes.push('no tokenizer.ggml.scores: merges are ordered by token id');
    const isNormal = (id: number) => types[id] === GgufTokenType.NORMAL;
    merges = spmMergesFromScores(tokens, scores ?? tokens.map((_, i) => -i), isNormal, vocab);
  } else throw new GgufError(`${where}: a "gpt2" (byte-level BPE) tokenizer needs tokenizer.ggml.merges`);
  // the tokenizers package refuses merges over pieces outside the vocabulary (llama.cpp just never applies them)
  const usable = merges.filter(([a, b]) => vocab.has(a) && vocab.has(b) && vocab.has(a + b));
  if (usable.length < merges.length) notes.push(`${merges.length - usable.length} merges use tokens outside the vocabulary; left out`);
  merges = usable;

  const bpe: Record<string, unknown> = {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: Object.fromEntries(vocab), merges,
  };
  let normalizer: Record<string, unknown> | null = null;
  let preTokenizer: Record<string, unknown> | null = null;
  let decoder: Record<string, unknown>;
  let addBosDefault: boolean;
  if (spm) {
    const prefix = meta['tokenizer.ggml.add_space_prefix'] !== false;
    const replace = { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' };
    normalizer = prefix ? { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' }, replace] } : replace;
    decoder = {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
        ...(prefix ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
      ],
    };
    bpe.byte_fallback = types.some((ty) => ty === GgufTokenType.BYTE);
    bpe.fuse_unk = true;
    bpe.unk_token = unk !== undefined ? tokens[unk] : null;
    addBosDefault = true;
  } else {
    const name = typeof meta['tokenizer.ggml.pre'] === 'string' ? (meta['tokenizer.ggml.pre'] as string) : undefined;
    let pre = name !== undefined ? PRE_TOKENIZERS[name] : undefined;
    if (!pre) {
      notes.push(
        `pre-tokenizer ${name === undefined ? '(none given)' : JSON.stringify(name)} is not one Loom maps; using the GPT-2 regex, so text may split ` +
          `differently from the model's own tokenizer (put its tokenizer.json next to the file to be exact)`,
      );
      pre = { kind: 'gpt2' };
    }
    preTokenizer = byteLevelPreTokenizer(pre.kind);
    if (pre.nfc) normalizer = { type: 'NFC' };
    bpe.ignore_merges = pre.ignoreMerges === true;
    bpe.unk_token = unk !== undefined ? tokens[unk] : null;
    decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    addBosDefault = pre.addBos === true;
  }

  // post-processor: BOS / EOS as the file says (llama.cpp's defaults otherwise)
  const flag = (key: string, dflt: boolean): boolean => (typeof meta[key] === 'boolean' ? (meta[key] as boolean) : dflt);
  let addBos = flag('tokenizer.ggml.add_bos_token', addBosDefault);
  let addEos = flag('tokenizer.ggml.add_eos_token', false);
  if (addBos && bos === undefined) {
    notes.push('add_bos_token is set but the file has no bos_token_id; no BOS is added');
    addBos = false;
  }
  if (addEos && eos === undefined) {
    notes.push('add_eos_token is set but the file has no eos_token_id; no EOS is added');
    addEos = false;
  }

  const tokenizerJson: Record<string, unknown> = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer,
    pre_tokenizer: preTokenizer,
    post_processor: addBos || addEos ? templateProcessing(addBos ? tokens[bos!] : undefined, bos, addEos ? tokens[eos!] : undefined, eos) : null,
    decoder,
    model: bpe,
  };

  // chat templates: the default one, and named ones as transformers' list form
  let chatTemplate: unknown = typeof meta['tokenizer.chat_template'] === 'string' ? meta['tokenizer.chat_template'] : undefined;
  const names = meta['tokenizer.chat_templates'];
  if (Array.isArray(names) && names.length) {
    const list: { name: string; template: string }[] = [];
    if (typeof chatTemplate === 'string') list.push({ name: 'default', template: chatTemplate });
    for (const nm of names) {
      const tpl = meta[`tokenizer.chat_template.${String(nm)}`];
      if (typeof tpl === 'string') list.push({ name: String(nm), template: tpl });
    }
    chatTemplate = list;
  }

  const tokenizerConfig: Record<string, unknown> = { add_bos_token: addBos, add_eos_token: addEos };
  if (bos !== undefined) tokenizerConfig.bos_token = tokens[bos];
  if (eos !== undefined) tokenizerConfig.eos_token = tokens[eos];
  if (pad !== undefined) tokenizerConfig.pad_token = tokens[pad];
  if (unk !== undefined) tokenizerConfig.unk_token = tokens[unk];
  if (chatTemplate !== undefined) tokenizerConfig.chat_template = chatTemplate;

  // end of generation
  const eog = new Set<number>();
  for (const id of [eos, idKey('tokenizer.ggml.eot_token_id'), idKey('tokenizer.ggml.eom_token_id')]) if (id !== undefined) eog.add(id);
  const loomEos = meta['loom.eos_token_ids'];
  if (Array.isArray(loomEos)) {
    for (const id of loomEos) if (typeof id === 'number' && Number.isInteger(id) && id >= 0 && id < n) eog.add(id);
  } else {
    for (let id = 0; id < n; id++) if (LLAMA_CPP_EOG_TEXTS.has(tokens[id]) && types[id] !== GgufTokenType.UNUSED) eog.add(id);
  }

  return {
    tokenizerJson,
    tokenizerConfig,
    generationConfig: { eos_token_id: [...eog], bos_token_id: bos ?? null, pad_token_id: pad ?? null },
    notes,
  };
}

function templateProcessing(bosTok: string | undefined, bosId: number | undefined, eosTok: string | undefined, eosId: number | undefined): Record<string, unknown> {
  const seq = (id: 'A' | 'B', typeId: number) => {
    const out: Record<string, unknown>[] = [];
    if (bosTok !== undefined) out.push({ SpecialToken: { id: bosTok, type_id: typeId } });
    out.push({ Sequence: { id, type_id: typeId } });
    if (eosTok !== undefined) out.push({ SpecialToken: { id: eosTok, type_id: typeId } });
    return out;
  };
  const special: Record<string, unknown> = {};
  if (bosTok !== undefined) special[bosTok] = { id: bosTok, ids: [bosId], tokens: [bosTok] };
  if (eosTok !== undefined) special[eosTok] = { id: eosTok, ids: [eosId], tokens: [eosTok] };
  return { type: 'TemplateProcessing', single: seq('A', 0), pair: [...seq('A', 0), ...seq('B', 1)], special_tokens: special };
}

/** The tokenizer embedded in a GGUF file's metadata, loaded like a model folder's (see ggufTokenizerParts). */
export function loadGgufTokenizer(meta: Record<string, unknown>, where = 'GGUF'): { tokenizer: Tokenizer; parts: GgufTokenizerParts } {
  const parts = ggufTokenizerParts(meta, where);
  const tokenizer = Tokenizer.fromJson(parts.tokenizerJson, {
    source: `${where} (embedded vocabulary)`,
    tokenizerConfig: parts.tokenizerConfig,
    generationConfig: { eos_token_id: parts.generationConfig.eos_token_id },
  });
  return { tokenizer, parts };
}

// ---- tokenizer.json → GGUF metadata --------------------------------------------------------------------
/** The Split regexes of Qwen2's and Llama 3's tokenizer.json pre_tokenizer (single digits vs groups of up to 3). */
export const QWEN2_PRE_RE = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
export const LLAMA3_PRE_RE = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

/**
 * llama.cpp's `tokenizer.ggml.pre` for a byte-level tokenizer.json, from its pre_tokenizer: Split with the
 * Qwen2 regex → "qwen2"; with the Llama 3 regex (\p{N}{1,3}) → "llama-bpe" (llama.cpp then also ignores
 * merges for whole-word vocabulary hits); Digits(individual) + ByteLevel(GPT-2 regex) → "smollm"; ByteLevel
 * alone → "gpt-2"; anything else "default" (llama.cpp's generic regex: tokenization may differ).
 */
export function ggufPreTokenizerName(tj: { pre_tokenizer?: unknown }): string {
  const steps: Record<string, unknown>[] = [];
  const walk = (p: unknown): void => {
    if (!p || typeof p !== 'object') return;
    const o = p as Record<string, unknown>;
    if (o.type === 'Sequence') for (const q of (o.pretokenizers as unknown[]) ?? []) walk(q);
    else steps.push(o);
  };
  walk(tj.pre_tokenizer);
  const types = steps.map((x) => String(x.type)).join(',');
  const regex = (x: Record<string, unknown>): string | undefined => ((x.pattern as { Regex?: string } | undefined)?.Regex);
  if (types === 'Split,ByteLevel' && steps[1].use_regex === false) {
    if (regex(steps[0]) === QWEN2_PRE_RE) return 'qwen2';
    if (regex(steps[0]) === LLAMA3_PRE_RE) return 'llama-bpe';
  }
  if (types === 'Digits,ByteLevel' && steps[0].individual_digits === true && steps[1].use_regex !== false) return 'smollm';
  if (types === 'ByteLevel' && steps[0].use_regex !== false) return 'gpt-2';
  return 'default';
}

/** What the tokenizer metadata needs of the model config (DecoderConfig fits). */
export type TokenizerMetadataConfig = Pick<DecoderConfig, 'vocabSize' | 'bosTokenId' | 'eosTokenIds' | 'padTokenId'>;

/**
 * The `tokenizer.*` metadata for an HF folder's tokenizer.json (+ tokenizer_config.json, generation_config.json);
 * {} when the folder has no BPE tokenizer.json. `cfg`: the model's config (the vocabulary is padded to its
 * vocab_size with unused [PADn] tokens, as llama.cpp's converter does).
 */
export function ggufTokenizerMetadata(dir: string, cfg: TokenizerMetadataConfig): Record<string, GgufValue> {
  const p = join(dir, 'tokenizer.json');
  if (!existsSync(p)) return {};
  const tj = JSON.parse(readFileSync(p, 'utf8'));
  const vocab = tj.model?.vocab as Record<string, number>;
  if (!vocab || Array.isArray(vocab)) return {};
  const tok = Tokenizer.fromDirSync(dir);
  const added = (tj.added_tokens ?? []) as { id: number; content: string; special: boolean }[];
  const n = Math.max(cfg.vocabSize, ...Object.values(vocab).map((x) => x + 1), ...added.map((a) => a.id + 1));
  const tokens: string[] = new Array(n);
  const types: number[] = new Array(n).fill(1);
  for (const [t, id] of Object.entries(vocab)) tokens[id] = t;
  for (const a of added) { tokens[a.id] = a.content; types[a.id] = a.special ? 3 : 4; }
  for (let i = 0; i < n; i++) if (tokens[i] === undefined) { tokens[i] = `[PAD${i}]`; types[i] = 5; }
  const merges = ((tj.model.merges ?? []) as (string | string[])[]).map((m) => (Array.isArray(m) ? m : [m.slice(0, m.indexOf(' ', 1)), m.slice(m.indexOf(' ', 1) + 1)]));
  const byteLevel = JSON.stringify(tj.pre_tokenizer ?? '').includes('ByteLevel') || JSON.stringify(tj.decoder ?? '').includes('ByteLevel');
  const md: Record<string, GgufValue> = {};
  if (byteLevel) {
    md['tokenizer.ggml.model'] = gv.str('gpt2');
    md['tokenizer.ggml.pre'] = gv.str(ggufPreTokenizerName(tj));
    md['tokenizer.ggml.merges'] = gv.arr(GgufType.STRING, merges.map((m) => m.join(' ')));
  } else {
    md['tokenizer.ggml.model'] = gv.str('llama');
    md['tokenizer.ggml.pre'] = gv.str('default');
    for (let i = 0; i < n; i++) if (/^<0x[0-9A-F]{2}>$/.test(tokens[i])) types[i] = 6;
    // llama.cpp's SentencePiece tokenizer merges the adjacent pair whose concatenation has the highest score. A
    // piece's score is minus the rank of the first merge producing it, so llama.cpp follows the merge order of
    // tokenizer.json; pieces no merge produces score below every merge.
    const firstRank = new Map<string, number>();
    merges.forEach(([a, b], r) => { if (!firstRank.has(a + b)) firstRank.set(a + b, r); });
    md['tokenizer.ggml.scores'] = gv.arr(GgufType.FLOAT32, tokens.map((t, i) => -(firstRank.get(t) ?? merges.length + i)));
    // the merges themselves too (llama.cpp ignores them for "llama"; Loom's reader uses them, so tokenize is exact),
    // unless a piece has a space and "left right" would be ambiguous: the reader then derives them from the scores
    if (!merges.some(([a, b]) => a.includes(' ') || b.includes(' '))) md['tokenizer.ggml.merges'] = gv.arr(GgufType.STRING, merges.map((m) => m.join(' ')));
    md['tokenizer.ggml.add_space_prefix'] = gv.bool(addsSpacePrefix(tj));
  }
  md['tokenizer.ggml.tokens'] = gv.arr(GgufType.STRING, tokens);
  md['tokenizer.ggml.token_type'] = gv.arr(GgufType.INT32, types);
  // Special ids as Loom encodes and renders chats: BOS is what the post-processor adds (else tokenizer_config's
  // bos_token, else config.json's); EOS is tokenizer_config's eos_token (what chat templates see, and what
  // llama.cpp's converter writes), else config.json's first. Every eos id of the folder goes to loom.eos_token_ids.
  const { before, after } = tok.postProcessorTokens();
  const bos = before.length === 1 ? before[0] : tok.bosId ?? cfg.bosTokenId ?? undefined;
  const eosTok = tok.eosToken !== undefined ? tok.tokenToId(tok.eosToken) : undefined;
  const eos = eosTok ?? cfg.eosTokenIds[0];
  const pad = cfg.padTokenId ?? tok.padId;
  if (bos !== undefined) md['tokenizer.ggml.bos_token_id'] = gv.u32(bos);
  if (eos !== undefined) md['tokenizer.ggml.eos_token_id'] = gv.u32(eos);
  if (pad !== undefined) md['tokenizer.ggml.padding_token_id'] = gv.u32(pad);
  const unk = tj.model.unk_token ? vocab[tj.model.unk_token] : undefined;
  if (unk !== undefined) md['tokenizer.ggml.unknown_token_id'] = gv.u32(unk);
  const allEos = [...new Set([...cfg.eosTokenIds, ...tok.eosIds, ...(eos !== undefined ? [eos] : [])])];
  if (allEos.length) md['loom.eos_token_ids'] = gv.arr(GgufType.UINT32, allEos);
  // add_bos / add_eos as Loom encodes (tokenizer.json's post-processor): llama.cpp's defaults differ per
  // tokenizer, so both are always written.
  md['tokenizer.ggml.add_bos_token'] = gv.bool(bos !== undefined && before.length === 1 && before[0] === bos);
  md['tokenizer.ggml.add_eos_token'] = gv.bool(eos !== undefined && after.length === 1 && after[0] === eos);
  // chat templates: the one Loom uses (tokenizer_config.json, chat_template.jinja or .json), plus named ones of
  // tokenizer_config's list form as llama.cpp's converter writes them (tokenizer.chat_template.NAME)
  if (tok.chatTemplate !== undefined) md['tokenizer.chat_template'] = gv.str(tok.chatTemplate);
  const tc = join(dir, 'tokenizer_config.json');
  const list = existsSync(tc) ? (JSON.parse(readFileSync(tc, 'utf8')) as { chat_template?: unknown }).chat_template : undefined;
  if (Array.isArray(list)) {
    const names: string[] = [];
    for (const x of list as { name?: unknown; template?: unknown }[]) {
      const name = String(x?.name ?? '').replace(/[^A-Za-z0-9]/g, '_');
      if (!name || name === 'default' || typeof x.template !== 'string') continue;
      names.push(name);
      md[`tokenizer.chat_template.${name}`] = gv.str(x.template);
    }
    if (names.length) md['tokenizer.chat_templates'] = gv.arr(GgufType.STRING, names);
  }
  return md;
}

/** Whether a SentencePiece-style tokenizer.json puts "▁" before the text (normalizer Prepend, or Metaspace prepending). */
function addsSpacePrefix(tj: { normalizer?: unknown; pre_tokenizer?: unknown }): boolean {
  let found = false;
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) return x.forEach(walk);
    if (!x || typeof x !== 'object') return;
    const o = x as Record<string, unknown>;
    if (o.type === 'Prepend' && o.prepend === '\u2581') found = true;
    if (o.type === 'Metaspace' && (o.prepend_scheme !== undefined ? o.prepend_scheme !== 'never' : o.add_prefix_space !== false)) found = true;
    Object.values(o).forEach(walk);
  };
  walk(tj.normalizer);
  walk(tj.pre_tokenizer);
  return found;
}
