// GGUF-embedded vocabularies (src/formats/gguf-tokenizer.ts) against the tokenizer.json they came from: real
// SentencePiece tokenizers (minueza's Mistral-7B vocabulary, TinyStories) and the byte-level fixtures (Qwen2.5,
// SmolLM2, Llama 3), written by our converter, and a llama.cpp-style file built from minueza's tokenizer.model
// (real scores, no merges). Same ids on a varied corpus, same decoded text, same chat prompts.
import t, { type Test } from 'tap';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgufError, GgufFile, GgufType, gv, type GgufValue } from '../../src/formats/gguf.ts';
import { writeGguf } from '../../src/formats/gguf-writer.ts';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { ggufTokenizerMetadata } from '../../src/formats/gguf-tokenizer.ts';
import { GGUF_PRE_TOKENIZERS, ggufTokenizerParts, loadGgufTokenizer, spmMergesFromScores } from '../../src/formats/gguf-tokenizer.ts';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { encodeChat, type ChatMessage } from '../../src/tokenize/chat-template.ts';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');
const tokFixtures = join(import.meta.dirname, '..', 'fixtures', 'tokenizers');
const minueza = join(shared, 'models/minueza-32m-ultrachat-tokenizer');
const tinystories = join(shared, 'models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-gguf-tok-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));

const CORPUS = [
  'Hello world', 'Hello  world', 'Once upon a time, there was a little girl named Lily. She loved to play outside.',
  "I'm sure they'll say it's fine, DON'T you?", '12345', '3.14159 and 1,000,000 and 2024-05-17', 'multiple     spaces   here',
  'line one\nline two\n\nline four\r\nend', 'tab\tseparated\tvalues\t', 'def f(x):\n\treturn x ** 2\n',
  'déjà vu — naïve café, Ærøskøbing, Œuvre', '東京は日本の首都です。', '中文测试：你好，世界！', 'مرحبا بالعالم', 'Привет, мир',
  'Family: 👨‍👩‍👧‍👦 🇫🇷 👍🏽 🙂🙂', 'a\u00a0b\u2003c', '~!@#$%^&*()_+{}|:"<>?`-=[]\\;\',./', 'x',
];
/** Texts with special tokens of the ChatML / Llama 3 families in them. */
const SPECIAL_TEXTS = [
  '<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n', 'x<|im_end|>y', 'before <|endoftext|> after',
  '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
];

/** encode (with and without special tokens) and decode of `got` equal those of `ref` on every text. */
function sameTokenization(t: Test, ref: Tokenizer, got: Tokenizer, texts: string[], label: string): void {
  let bad = 0;
  for (const s of texts) {
    for (const add of [true, false]) {
      const a = ref.encode(s, { addSpecialTokens: add }), b = got.encode(s, { addSpecialTokens: add });
      if (JSON.stringify(a) !== JSON.stringify(b)) {
        bad++;
        t.same(b, a, `${label}: ${JSON.stringify(s)} addSpecialTokens=${add}`);
        continue;
      }
      if (got.decode(b) !== ref.decode(a)) {
        bad++;
        t.equal(got.decode(b), ref.decode(a), `${label}: decode of ${JSON.stringify(s)}`);
      }
      if (got.decode(b, { skipSpecialTokens: false }) !== ref.decode(a, { skipSpecialTokens: false })) {
        bad++;
        t.equal(got.decode(b, { skipSpecialTokens: false }), ref.decode(a, { skipSpecialTokens: false }), `${label}: decode with specials of ${JSON.stringify(s)}`);
      }
    }
  }
  t.equal(bad, 0, `${label}: same ids and decoded text on ${texts.length} texts`);
}

const CHATS: ChatMessage[][] = [
  [{ role: 'user', content: 'Hi' }],
  [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'What is 12345 + 1?' }, { role: 'assistant', content: '12346.' }, { role: 'user', content: 'Merci ! 🙂' }],
];
function sameChats(t: Test, ref: Tokenizer, got: Tokenizer, label: string): void {
  t.equal(got.chatTemplate, ref.chatTemplate, `${label}: chat template from tokenizer.chat_template`);
  for (const msgs of CHATS) {
    const a = encodeChat(ref, msgs), b = encodeChat(got, msgs);
    t.equal(b.text, a.text, `${label}: rendered chat`);
    t.same(b.ids, a.ids, `${label}: chat prompt ids (${a.ids.length})`);
  }
}

/** Writes a GGUF with only metadata (tokenizer files without weights). */
function metadataOnlyGguf(name: string, md: Record<string, GgufValue>): string {
  const p = join(tmp, name);
  writeGguf(p, { metadata: { 'general.architecture': gv.str('llama'), ...md }, tensors: {} });
  return p;
}
const metaOf = (p: string) => new GgufFile(p).metadataObject();

/** A tiny model folder (a golden checkpoint) with a fixture tokenizer (as test/formats/gguf.test.ts). */
function modelWithTokenizer(golden: string, fam: string): string {
  const d = mkdtempSync(join(tmp, `${fam}-`));
  for (const f of readdirSync(join(shared, 'goldens', golden))) if (f === 'config.json' || f === 'model.safetensors') copyFileSync(join(shared, 'goldens', golden, f), join(d, f));
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(tokFixtures, fam, f), join(d, f));
  return d;
}

t.test('SentencePiece ("llama"): minueza (Mistral-7B vocabulary + ChatML) written by our converter', async (t) => {
  const md = ggufTokenizerMetadata(minueza, loadDecoderConfig(minueza));
  const meta = metaOf(metadataOnlyGguf('minueza.gguf', md));
  t.equal(meta['tokenizer.ggml.model'], 'llama');
  t.equal(meta['tokenizer.ggml.add_bos_token'], false, 'add_bos_token false (the post-processor adds nothing)');
  t.equal(meta['tokenizer.ggml.add_eos_token'], false);
  t.equal(meta['tokenizer.ggml.add_space_prefix'], true);
  t.equal(meta['tokenizer.ggml.eos_token_id'], 32000, 'eos = tokenizer_config eos_token <|im_end|>');
  t.ok(typeof meta['tokenizer.chat_template'] === 'string', 'chat template stored');
  const ref = Tokenizer.fromDirSync(minueza);
  const { tokenizer, parts } = loadGgufTokenizer(meta, 'minueza.gguf');
  t.same(parts.notes, []);
  sameTokenization(t, ref, tokenizer, [...CORPUS, ...SPECIAL_TEXTS], 'minueza');
  sameChats(t, ref, tokenizer, 'minueza');
  t.equal(tokenizer.bosToken, '<s>');
  t.equal(tokenizer.eosToken, '<|im_end|>');
  t.same(tokenizer.eosIds, [32000]);
  t.equal(tokenizer.addBosToken, false);
});

/** llama.cpp's converter on a SentencePiece model (convert_hf_to_gguf.py _create_vocab_sentencepiece): pieces,
 *  scores and types from tokenizer.model, added_tokens.json appended (user-defined, score -1000), tokens of
 *  tokenizer_config's added_tokens_decoder marked special become control; no merges. */
function llamaCppStyleSpm(dir: string): Record<string, GgufValue> {
  const b = readFileSync(join(dir, 'tokenizer.model'));
  let p = 0;
  const varint = (): number => { let r = 0, s = 0, x: number; do { x = b[p++]; r += (x & 0x7f) * 2 ** s; s += 7; } while (x & 0x80); return r; };
  const skip = (w: number): void => {
    if (w === 0) varint();
    else if (w === 1) p += 8;
    else if (w === 2) { const l = varint(); p += l; }
    else if (w === 5) p += 4;
    else throw new Error(`protobuf wire type ${w}`);
  };
  const tokens: string[] = [], scores: number[] = [], types: number[] = [];
  while (p < b.length) { // ModelProto: field 1 = repeated SentencePiece { 1: piece, 2: score, 3: type }
    const k = varint();
    if (k >>> 3 !== 1 || (k & 7) !== 2) { skip(k & 7); continue; }
    const end = varint() + p;
    let piece = '', score = 0, type = 1;
    while (p < end) {
      const k2 = varint();
      if (k2 === (1 << 3 | 2)) { const l = varint(); piece = b.toString('utf8', p, p + l); p += l; }
      else if (k2 === (2 << 3 | 5)) { score = b.readFloatLE(p); p += 4; }
      else if (k2 === (3 << 3 | 0)) type = varint();
      else skip(k2 & 7);
    }
    tokens.push(piece); scores.push(score); types.push(type);
  }
  for (const [content, id] of Object.entries(JSON.parse(readFileSync(join(dir, 'added_tokens.json'), 'utf8')) as Record<string, number>)) {
    tokens[id] = content; scores[id] = -1000; types[id] = 4;
  }
  const tc = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
  for (const [id, a] of Object.entries(tc.added_tokens_decoder as Record<string, { content: string; special: boolean }>)) if (a.special) types[Number(id)] = 3;
  const idOf = (s: string) => tokens.indexOf(s);
  return {
    'tokenizer.ggml.model': gv.str('llama'), 'tokenizer.ggml.pre': gv.str('default'),
    'tokenizer.ggml.tokens': gv.arr(GgufType.STRING, tokens), 'tokenizer.ggml.scores': gv.arr(GgufType.FLOAT32, scores),
    'tokenizer.ggml.token_type': gv.arr(GgufType.INT32, types),
    'tokenizer.ggml.bos_token_id': gv.u32(idOf(tc.bos_token)), 'tokenizer.ggml.eos_token_id': gv.u32(idOf(tc.eos_token)),
    'tokenizer.ggml.unknown_token_id': gv.u32(idOf(tc.unk_token)), 'tokenizer.ggml.padding_token_id': gv.u32(idOf(tc.pad_token)),
    'tokenizer.ggml.add_bos_token': gv.bool(tc.add_bos_token), 'tokenizer.ggml.add_eos_token': gv.bool(tc.add_eos_token),
    'tokenizer.chat_template': gv.str(tc.chat_template),
  };
}

t.test('SentencePiece without merges: a llama.cpp-style file from tokenizer.model (merges derived from scores)', async (t) => {
  const md = llamaCppStyleSpm(minueza);
  const meta = metaOf(metadataOnlyGguf('minueza-llamacpp.gguf', md));
  t.equal(meta['tokenizer.ggml.merges'], undefined, 'no merges in the file');
  const tj = JSON.parse(readFileSync(join(minueza, 'tokenizer.json'), 'utf8'));
  const parts = ggufTokenizerParts(meta, 'minueza-llamacpp.gguf');
  const derived = (parts.tokenizerJson.model as { merges: [string, string][] }).merges.map((m) => m.join(' '));
  t.same(derived, (tj.model.merges as string[]), `merges derived from the scores = tokenizer.json's ${tj.model.merges.length} merges, in order`);
  const ref = Tokenizer.fromDirSync(minueza);
  const { tokenizer } = loadGgufTokenizer(meta, 'minueza-llamacpp.gguf');
  sameTokenization(t, ref, tokenizer, [...CORPUS, ...SPECIAL_TEXTS], 'minueza (llama.cpp-style)');
  sameChats(t, ref, tokenizer, 'minueza (llama.cpp-style)');
  t.ok(tokenizer.eosIds.includes(32000), 'eos <|im_end|>');

  // our own file without its merges (as if written by a converter that stores none): the scores Loom writes
  // reproduce the merge order too
  const ours: Record<string, GgufValue> = {};
  for (const [k, v] of new GgufFile(join(tmp, 'minueza.gguf')).metadata) if (k !== 'tokenizer.ggml.merges') ours[k] = v;
  const { tokenizer: fromScores } = loadGgufTokenizer(metaOf(metadataOnlyGguf('minueza-nomerges.gguf', ours)));
  sameTokenization(t, ref, fromScores, CORPUS, 'minueza (our scores, no merges)');

  t.same(spmMergesFromScores(['a', 'b', 'ab', 'c', 'abc', 'bc'], [0, 0, -1, 0, -2, -3], () => true, new Map([['a', 0], ['b', 1], ['ab', 2], ['c', 3], ['abc', 4], ['bc', 5]])),
    [['a', 'b'], ['a', 'bc'], ['ab', 'c'], ['b', 'c']], 'by merged score, then the splits of one piece by (left id, right id)');
});

t.test('SentencePiece: TinyStories (real model) written by our converter', async (t) => {
  const out = join(tmp, 'tinystories.gguf');
  convertHfToGguf(tinystories, out);
  const ref = Tokenizer.fromDirSync(tinystories);
  const { tokenizer, parts } = loadGgufTokenizer(metaOf(out), out);
  t.same(parts.notes, []);
  sameTokenization(t, ref, tokenizer, CORPUS, 'tinystories');
  t.equal(tokenizer.addBosToken, true);
  t.equal(tokenizer.encode('Once')[0], 1, 'BOS <|start_story|> added (add_bos_token)');
  t.equal(tokenizer.chatTemplate, undefined, 'no chat template in the folder, none in the file');
  // TinyStories' added tokens are `normalized: true`: tokenizer.json matches them only after the "▁" prefix
  // is added, so "<|start_story|>Once" gives "▁", <|start_story|>, "Once" (no "▁"). GGUF has no such flag:
  // like llama.cpp, the rebuilt tokenizer matches them in the raw text and prefixes the text after them.
  const once = tokenizer.encode('Once', { addSpecialTokens: false });
  t.same(tokenizer.encode('<|start_story|>Once', { addSpecialTokens: false }), [1, ...once], 'documented difference: llama.cpp-style split around special tokens');
  t.notSame(ref.encode('<|start_story|>Once', { addSpecialTokens: false }), [1, ...once]);
});

t.test('SentencePiece: Mistral v0.3 fixture (Metaspace prepend_scheme "first"), the documented differences', async (t) => {
  const dir = modelWithTokenizer('mistral-tiny', 'mistral');
  const out = join(tmp, 'mistral.gguf');
  convertHfToGguf(dir, out);
  const ref = Tokenizer.fromDirSync(dir);
  const { tokenizer } = loadGgufTokenizer(metaOf(out), out);
  // same wherever the text does not start with a space and has no special token followed by text
  sameTokenization(t, ref, tokenizer, CORPUS.filter((s) => !s.startsWith(' ')), 'mistral');
  // GGUF cannot say "first": like llama.cpp, "▁" is prepended to the text after each special token (the
  // [INST] of the chat template) and even to text that starts with a space
  const sp = tokenizer.tokenToId('\u2581')!;
  t.equal(tokenizer.chatTemplate, ref.chatTemplate);
  for (const msgs of CHATS) {
    const a = encodeChat(ref, msgs), b = encodeChat(tokenizer, msgs);
    t.equal(b.text, a.text, 'rendered chat');
    const withoutPrefix = b.ids.filter((id, i) => !(id === sp && i > 0 && tokenizer.specialIds.has(b.ids[i - 1])));
    t.same(withoutPrefix, a.ids, 'documented difference: chat prompt ids differ only by a "▁" after special tokens');
  }
  t.same(tokenizer.encode(' Hello', { addSpecialTokens: false }), [sp, ...ref.encode(' Hello', { addSpecialTokens: false })], 'documented difference: " Hello" gets an extra "▁"');
});

const BYTE_LEVEL: [string, string, string][] = [['qwen2.5', 'qwen2-tiny', 'qwen2'], ['smollm2', 'llama-tiny', 'smollm'], ['llama3', 'llama3-rope-tiny', 'llama-bpe']];

t.test('byte-level ("gpt2"): Qwen2.5, SmolLM2 and Llama 3 fixtures written by our converter', async (t) => {
  for (const [fam, golden, pre] of BYTE_LEVEL) {
    const dir = modelWithTokenizer(golden, fam);
    const out = join(tmp, `${fam}.gguf`);
    convertHfToGguf(dir, out);
    const meta = metaOf(out);
    t.equal(meta['tokenizer.ggml.pre'], pre);
    const ref = Tokenizer.fromDirSync(dir);
    const { tokenizer, parts } = loadGgufTokenizer(meta, out);
    t.same(parts.notes, [], `${fam}: nothing assumed`);
    sameTokenization(t, ref, tokenizer, [...CORPUS, ...SPECIAL_TEXTS], fam);
    sameChats(t, ref, tokenizer, fam);
    t.equal(tokenizer.addBosToken, ref.addBosToken, `${fam}: add_bos_token ${ref.addBosToken}`);
    t.equal(tokenizer.eosToken, ref.eosToken, `${fam}: eos_token`);
    for (const id of ref.eosIds) t.ok(tokenizer.eosIds.includes(id), `${fam}: eos id ${id} kept`);
    // llama.cpp's other names for the same regex give the same tokenizer
    const alias = { qwen2: 'deepseek-r1-qwen', smollm: 'starcoder', 'llama-bpe': 'llama3' }[pre]!;
    t.ok(GGUF_PRE_TOKENIZERS.includes(alias));
    const { tokenizer: aliased } = loadGgufTokenizer({ ...meta, 'tokenizer.ggml.pre': alias });
    sameTokenization(t, ref, aliased, CORPUS, `${fam} as pre "${alias}"`);
  }
  // Qwen2's NFC normalizer is applied (transformers does; llama.cpp does not): NFD input gives the NFC ids
  const dir = modelWithTokenizer('qwen2-tiny', 'qwen2.5');
  const { tokenizer } = loadGgufTokenizer(metaOf(join(tmp, 'qwen2.5.gguf')));
  const nfd = 'cafe\u0301 déjà'.normalize('NFD');
  t.same(tokenizer.encode(nfd), Tokenizer.fromDirSync(dir).encode(nfd), 'qwen2: NFD text as transformers tokenizes it');
});

t.test('an unknown pre-tokenizer falls back to the GPT-2 regex, with a note', async (t) => {
  const meta = { ...metaOf(join(tmp, 'smollm2.gguf')), 'tokenizer.ggml.pre': 'some-future-model' };
  const { tokenizer, parts } = loadGgufTokenizer(meta, 'x.gguf');
  t.equal(parts.notes.length, 1);
  t.match(parts.notes[0], /pre-tokenizer "some-future-model" is not one Loom maps; using the GPT-2 regex/);
  const gpt2 = loadGgufTokenizer({ ...meta, 'tokenizer.ggml.pre': 'gpt-2' }).tokenizer;
  t.same(tokenizer.encode('12345 Hello world'), gpt2.encode('12345 Hello world'), 'splits like "gpt-2"');
  t.same(parts.tokenizerJson.pre_tokenizer, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }, 'ByteLevel with its GPT-2 regex');
  t.match(ggufTokenizerParts({ ...meta, 'tokenizer.ggml.pre': undefined }).notes[0], /pre-tokenizer \(none given\)/);
});

t.test('round trip of add_bos / add_eos and named chat templates', async (t) => {
  // minueza's tokenizer with a post-processor that adds <s> ... </s> and a list of chat templates
  const dir = mkdtempSync(join(tmp, 'mz-'));
  for (const f of readdirSync(minueza)) copyFileSync(join(minueza, f), join(dir, f));
  const tj = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8'));
  const special = (id: string, typeId = 0) => ({ SpecialToken: { id, type_id: typeId } });
  tj.post_processor = {
    type: 'TemplateProcessing', single: [special('<s>'), { Sequence: { id: 'A', type_id: 0 } }, special('</s>')],
    pair: [special('<s>'), { Sequence: { id: 'A', type_id: 0 } }, special('</s>'), special('<s>', 1), { Sequence: { id: 'B', type_id: 1 } }, special('</s>', 1)],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } },
  };
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj));
  const tc = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
  Object.assign(tc, { add_bos_token: true, add_eos_token: true, eos_token: '</s>' });
  tc.chat_template = [{ name: 'default', template: tc.chat_template }, { name: 'tool_use', template: '{{ tools | length }} tools' }];
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(tc));
  const meta = metaOf(metadataOnlyGguf('mz-bos-eos.gguf', ggufTokenizerMetadata(dir, loadDecoderConfig(dir))));
  t.equal(meta['tokenizer.ggml.add_bos_token'], true);
  t.equal(meta['tokenizer.ggml.add_eos_token'], true);
  t.equal(meta['tokenizer.ggml.eos_token_id'], 2);
  t.same(meta['tokenizer.chat_templates'], ['tool_use']);
  t.equal(meta['tokenizer.chat_template.tool_use'], '{{ tools | length }} tools');
  const ref = Tokenizer.fromDirSync(dir);
  const { tokenizer, parts } = loadGgufTokenizer(meta);
  t.same(tokenizer.encode('Hi'), ref.encode('Hi'));
  t.same(tokenizer.encode('Hi').slice(-1), [2], 'EOS appended');
  t.same(parts.tokenizerConfig.chat_template, tc.chat_template, 'named templates back in the list form');
  t.equal(tokenizer.chatTemplate, ref.chatTemplate, 'the default one is used');
  t.same(new Set(tokenizer.eosIds), new Set(ref.eosIds), 'eos ids: tokenizer_config and generation_config ones');
});

t.test('end of generation for files from other converters: eos/eot/eom and llama.cpp\'s end-of-turn tokens', async (t) => {
  const meta = metaOf(join(tmp, 'qwen2.5.gguf'));
  const tokens = meta['tokenizer.ggml.tokens'] as string[];
  const other = { ...meta, 'loom.eos_token_ids': undefined, 'tokenizer.ggml.eos_token_id': tokens.indexOf('<|endoftext|>') };
  const { parts } = loadGgufTokenizer(other);
  t.same(parts.generationConfig.eos_token_id.sort(), [tokens.indexOf('<|endoftext|>'), tokens.indexOf('<|im_end|>')].sort(), '<|im_end|> ends generation as in llama.cpp');
  const withEot = { ...meta, 'tokenizer.ggml.eot_token_id': 7 };
  t.ok(loadGgufTokenizer(withEot).parts.generationConfig.eos_token_id.includes(7), 'eot_token_id');
});

t.test('unsupported or missing tokenizers give clear errors', async (t) => {
  const base = { 'tokenizer.ggml.tokens': ['a', 'b'], 'tokenizer.ggml.token_type': [1, 1] };
  for (const model of ['bert', 't5', 'rwkv', 'plamo2']) {
    t.throws(() => ggufTokenizerParts({ ...base, 'tokenizer.ggml.model': model }, 'm.gguf'),
      new GgufError(`m.gguf: GGUF tokenizer model "${model}" is not supported (only "gpt2", byte-level BPE, and "llama", SentencePiece); put the model's tokenizer.json next to the file`), model);
  }
  t.throws(() => ggufTokenizerParts({}, 'm.gguf'), /m\.gguf: the file has no embedded vocabulary/);
  t.throws(() => ggufTokenizerParts({ 'tokenizer.ggml.model': 'gpt2', ...base }, 'm.gguf'), /needs tokenizer\.ggml\.merges/);
  t.throws(() => ggufTokenizerParts({ 'tokenizer.ggml.model': 'llama', 'tokenizer.ggml.tokens': 'abc' }, 'm.gguf'), /tokenizer\.ggml\.tokens is missing or not a list of strings/);
  t.throws(() => ggufTokenizerParts({ ...base, 'tokenizer.ggml.model': 'llama', 'tokenizer.ggml.scores': [0] }, 'm.gguf'), /tokenizer\.ggml\.scores must be a list of 2 numbers/);
});
