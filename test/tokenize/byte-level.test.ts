// Our synchronous Tokenizer against the `tokenizers` package (async encode/decode, the reference) on the
// tokenizer families Loom serves: Qwen2.5 (NFC + Split regex + ByteLevel), SmolLM2 (Digits + GPT-2 ByteLevel),
// Llama 3 (Split regex + ByteLevel, ignore_merges, <|begin_of_text|> template) and Mistral v0.3 (Metaspace
// prepend_scheme "first", byte fallback). Fixtures: test/fixtures/tokenizers/<family>/ (generate.py there);
// expected.json holds the Python library's encodings of a few texts, a second reference.
import t from 'tap';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ASYNC_ENCODE_MIN_CHARS, Tokenizer, TokenizerError } from '../../src/tokenize/tokenizer.ts';
import { encodeChat, encodeChatAsync, renderChat } from '../../src/tokenize/chat-template.ts';

const fixtures = join(import.meta.dirname, '..', 'fixtures', 'tokenizers');
const FAMILIES = ['qwen2.5', 'smollm2', 'llama3', 'mistral'] as const;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let x = s;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const FRAGMENTS = [
  // words, contractions (case-insensitive in the Qwen / Llama 3 regex), punctuation
  'Hello', 'world', ' the', 'information', ' Information', "it's", "I'M", "they'll", "we've", "don't", "she'd", "'s", "'t", "'re", "O'Neil", "rock'n'roll",
  '!', '?!', '...', ' --', '(parens)', '"quoted"', '«guillemets»', '¿qué?',
  // digits: Llama 3 groups \p{N}{1,3}, Qwen / SmolLM2 split single digits
  '1', '12', '123', '1234', '1234567', '3.14159', '1,000,000', '٣٤٥', '①②', '½', '2024-11-22',
  // whitespace runs, newlines, tabs, CRLF, unusual spaces
  ' ', '  ', '   ', '\n', '\n\n', ' \n ', '\t', '\t\t', '\r\n', '\r', '\u00a0', '\u2003', '\u3000', '\u200b', '\f', '\v',
  // emoji incl. ZWJ sequences, flags, skin tones, variation selectors
  '🙂', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷🇯🇵', '👍🏽', '❤️', '🧑🏿‍💻', '😀😃', '✨',
  // CJK, Hangul, kana, RTL, Devanagari, combining marks (NFC / NFD), ligatures
  '東京', '北京是中国的首都', '日本語のテキスト', '한국어', 'مرحبا', 'שלום', 'नमस्ते', 'e\u0301', 'é', 'A\u030A', 'ﬁ', 'Ω', 'ﾊﾝｶｸ',
  // code
  'def f(x):\n    return x ** 2', 'for (let i = 0; i < n; i++) {', '}', '=>', '!==', '{"a": [1, 2]}', '<div class="x">', '#include <stdio.h>', '__init__', 'x_1',
  // special / added tokens of every family (only the fixture's own are special to it)
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<tool_call>', '</tool_call>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>',
  '<|end_header_id|>', '<|reserved_special_token_5|>', '<s>', '</s>', '[INST]', '[/INST]', '<unk>', '[TOOL_CALLS]', '<repo_name>', '<|fim_prefix|>',
  '<0x41>', 'Ġ', '▁', '<|im_start', 'im_end|>',
];

function randomTexts(n: number, seed: number): string[] {
  const rnd = rng(seed);
  const out: string[] = ['', ' ', '  ', '\n', '\t', ' a', 'a ', '  leading', 'trailing  ', 'x'.repeat(300), '1'.repeat(40), ' '.repeat(17), '\n \n\t \r\n',
    '<|im_start|><|im_end|>', '[INST][/INST]', '<|begin_of_text|><|begin_of_text|>', 'a<s>b', '<s> a', ' <s>', 'é\u0301'];
  for (let i = 0; i < n; i++) {
    let s = '';
    const k = 1 + Math.floor(rnd() * 14);
    for (let j = 0; j < k; j++) {
      s += FRAGMENTS[Math.floor(rnd() * FRAGMENTS.length)];
      const r = rnd();
      if (r < 0.4) s += ' ';
      else if (r < 0.45) s += '\n';
    }
    // random code points (BMP letters / symbols / astral) now and then
    if (rnd() < 0.25) for (let j = 0; j < 4; j++) s += String.fromCodePoint(0x20 + Math.floor(rnd() * (rnd() < 0.8 ? 0xd7ff - 0x20 : 0x1ffff - 0x20)));
    out.push(s);
  }
  return out;
}

function stream(tok: Tokenizer, ids: number[], skipSpecialTokens: boolean): string {
  const sd = tok.createStreamDecoder({ skipSpecialTokens });
  let s = '';
  for (const id of ids) s += sd.push(id);
  return s + sd.flush();
}

for (const fam of FAMILIES) {
  const dir = join(fixtures, fam);

  t.test(`${fam}: Python reference encodings (expected.json)`, async (t) => {
    const tok = Tokenizer.fromDirSync(dir);
    const exp = JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8')) as { cases: { text: string; ids: number[]; ids_no_special: number[]; decoded: string }[] };
    for (const c of exp.cases) {
      t.same(tok.encode(c.text), c.ids, `encode ${JSON.stringify(c.text)}`);
      t.same(tok.encode(c.text, { addSpecialTokens: false }), c.ids_no_special, `encode (no specials) ${JSON.stringify(c.text)}`);
      t.equal(tok.decode(c.ids_no_special, { skipSpecialTokens: false }), c.decoded, `decode ${JSON.stringify(c.text)}`);
      t.same(await tok.encodeAsync(c.text), c.ids, `encodeAsync ${JSON.stringify(c.text)}`);
      t.same(await tok.encodeNative(c.text), c.ids, `encodeNative ${JSON.stringify(c.text)}`);
    }
  });

  t.test(`${fam}: sync encode / decode / stream decode equal the tokenizers package`, async (t) => {
    const tok = Tokenizer.fromDirSync(dir);
    let mism = 0, checked = 0;
    const report = (ok: boolean, got: unknown, want: unknown, what: string): void => {
      checked++;
      if (ok) return;
      if (mism++ < 8) t.same(got, want, what);
    };
    for (const text of randomTexts(250, 1234 + fam.length)) {
      for (const add of [true, false]) {
        const ref = (await tok.native.encode(text, null, { addSpecialTokens: add })).getIds();
        const got = tok.encode(text, { addSpecialTokens: add });
        report(JSON.stringify(ref) === JSON.stringify(got), got, ref, `encode ${JSON.stringify(text)} add=${add}`);
      }
      const ids = tok.encode(text);
      for (const skip of [true, false]) {
        const refDec = await tok.native.decode(ids, skip);
        const dec = tok.decode(ids, { skipSpecialTokens: skip });
        report(dec === refDec, dec, refDec, `decode ${JSON.stringify(text)} skip=${skip}`);
        const s = stream(tok, ids, skip);
        report(s === refDec, s, refDec, `stream ${JSON.stringify(text)} skip=${skip}`);
      }
    }
    t.equal(mism, 0, `no mismatches in ${checked} comparisons`);
  });

  t.test(`${fam}: decoding arbitrary id sequences (partial UTF-8, specials) matches, streaming included`, async (t) => {
    const tok = Tokenizer.fromDirSync(dir);
    const rnd = rng(99);
    let mism = 0;
    for (let i = 0; i < 150; i++) {
      const n = 1 + Math.floor(rnd() * 12);
      // ids past the vocabulary too: a model's padded embedding rows (Qwen2.5: 151936 rows, 151665 tokens)
      const ids = Array.from({ length: n }, () => Math.floor(rnd() * (tok.vocabSize + 20)));
      for (const skip of [true, false]) {
        const ref = await tok.native.decode(ids, skip);
        const got = tok.decode(ids, { skipSpecialTokens: skip });
        if (got !== ref && mism++ < 5) t.equal(got, ref, `decode ${JSON.stringify(ids)} skip=${skip}`);
        const s = stream(tok, ids, skip);
        if (s !== ref && mism++ < 5) t.equal(s, ref, `stream ${JSON.stringify(ids)} skip=${skip}`);
      }
    }
    t.equal(mism, 0, 'no mismatches');
  });

  t.test(`${fam}: chat template renders and encodeChat ids equal the reference encode of the text`, async (t) => {
    const tok = Tokenizer.fromDirSync(dir);
    t.ok(tok.chatTemplate, 'chat_template present');
    const messages = fam === 'mistral'
      ? [{ role: 'user' as const, content: 'Hi there 👋' }, { role: 'assistant' as const, content: 'Hello! 123' }, { role: 'user' as const, content: "What's 2+2?" }]
      : [{ role: 'system' as const, content: 'Be brief.' }, { role: 'user' as const, content: 'Hi there 👋' }, { role: 'assistant' as const, content: 'Hello! 123' }, { role: 'user' as const, content: "What's 2+2?" }];
    const text = renderChat(tok, messages);
    const { ids } = encodeChat(tok, messages);
    t.equal(tok.syncEncode, true);
    t.same((await encodeChatAsync(tok, messages)).ids, ids, 'encodeChatAsync = encodeChat');
    const startsWithBos = !!tok.bosToken && text.startsWith(tok.bosToken);
    const ref = (await tok.native.encode(text, null, { addSpecialTokens: !startsWithBos })).getIds();
    t.same(ids, ref, 'encodeChat = reference encode');
    if (tok.bosId !== undefined && (fam === 'llama3' || fam === 'mistral')) {
      t.equal(ids[0], tok.bosId, 'starts with BOS');
      t.not(ids[1], tok.bosId, 'BOS not doubled');
    }
    t.ok(ids.some((id) => tok.specialIds.has(id)), 'chat markers are special tokens');
    t.ok(tok.eosIds.length > 0, 'eos ids known');
    t.equal(tok.decode(ids, { skipSpecialTokens: false }), await tok.native.decode(ids, false));
  });
}

t.test('long inputs: sync encode (no recursion / spread limits) = native; encodeAsync and encodeChatAsync route long texts off-thread with the same ids', async (t) => {
  const alpaca = readFileSync(join(import.meta.dirname, '..', '..', '..', 'shared', 'data', 'alpaca', 'train.jsonl'), 'utf8')
    .split('\n').filter(Boolean).slice(0, 400).map((l) => (JSON.parse(l).messages as { content: string }[]).map((m) => m.content).join('\n')).join('\n\n');
  t.ok(alpaca.length > ASYNC_ENCODE_MIN_CHARS * 4);
  for (const fam of FAMILIES) {
    const tok = Tokenizer.fromDirSync(join(fixtures, fam));
    const ids = tok.encode(alpaca);
    t.same(ids, await tok.encodeNative(alpaca), `${fam}: ${alpaca.length} chars, ${ids.length} tokens`);
    t.same(await tok.encodeAsync(alpaca), ids);
    const messages = [
      { role: 'user' as const, content: [{ type: 'text', text: alpaca.slice(0, 70_000), cache_control: { type: 'ephemeral' as const } }, { type: 'text', text: 'Summarize.' }] },
    ];
    const a = encodeChat(tok, messages), b = await encodeChatAsync(tok, messages);
    t.same(b, a, `${fam}: encodeChatAsync = encodeChat on a long chat`);
    t.ok(a.breakpointTokens[0] > 10_000);
  }
  // 200k tokens through TemplateProcessing (Llama 3) and one 400k-symbol word (Mistral: Metaspace split=false)
  for (const fam of ['llama3', 'mistral']) {
    const tok = Tokenizer.fromDirSync(join(fixtures, fam));
    const big = 'a '.repeat(200_000);
    const ids = tok.encode(big);
    t.ok(ids.length >= 200_000, `${fam}: ${ids.length} tokens`);
    t.same(ids, await tok.encodeNative(big));
  }
});

t.test('family specifics', async (t) => {
  const qwen = Tokenizer.fromDirSync(join(fixtures, 'qwen2.5'));
  const d = qwen.encode('12345', { addSpecialTokens: false });
  t.equal(d.length, 5, 'Qwen: one token per digit');
  t.same(qwen.encode('e\u0301'), qwen.encode('é'), 'Qwen: NFC normalizer');
  const tc = qwen.tokenToId('<tool_call>')!;
  t.notOk(qwen.specialIds.has(tc), '<tool_call> is added but not special');
  t.equal(qwen.decode(qwen.encode('<tool_call>x</tool_call>')), '<tool_call>x</tool_call>', 'non-special added tokens survive skipSpecialTokens');
  t.equal(qwen.addBosToken, false);

  const smol = Tokenizer.fromDirSync(join(fixtures, 'smollm2'));
  t.equal(smol.encode('2024', { addSpecialTokens: false }).length, 4, 'SmolLM2: Digits(individual)');
  t.equal(smol.tokenToId('<|im_start|>'), 1);

  const llama = Tokenizer.fromDirSync(join(fixtures, 'llama3'));
  const enc = (x: string): number[] => llama.encode(x, { addSpecialTokens: false });
  t.same(enc('1234567'), [...enc('123'), ...enc('456'), ...enc('7')], 'Llama 3: digits in groups of three');
  t.equal(llama.encode('hi')[0], llama.bosId, 'Llama 3: BOS from the post-processor');
  t.equal(llama.addBosToken, true);
  t.same(llama.eosIds.map((i) => llama.idToToken(i)).sort(), ['<|end_of_text|>', '<|eom_id|>', '<|eot_id|>'].sort());
  // ignore_merges: a pre-token that is in the vocabulary is taken whole even where the merges would split it
  const tj = JSON.parse(readFileSync(join(fixtures, 'llama3', 'tokenizer.json'), 'utf8'));
  const merged = new Set<string>((tj.model.merges as string[]).map((m) => m.replace(' ', '')));
  const unmerged = Object.keys(tj.model.vocab).filter((k) => k.length > 3 && !merged.has(k) && k.startsWith('Ġ'));
  t.ok(unmerged.length > 10, 'fixture has tokens without a merge path');
  const word = unmerged[0].replace('Ġ', ' ');
  t.same(llama.encode(word, { addSpecialTokens: false }), [tj.model.vocab[unmerged[0]]], `"${word}" is one token (ignore_merges)`);

  const mis = Tokenizer.fromDirSync(join(fixtures, 'mistral'));
  t.equal(mis.stripsLeadingSpace, true);
  const a1 = mis.encode('hi', { addSpecialTokens: false });
  const a2 = mis.encode('[INST]hi', { addSpecialTokens: false }).slice(1);
  t.not(JSON.stringify(a1), JSON.stringify(a2), 'Metaspace prepend_scheme "first": no ▁ after a special token');
  const emoji = mis.encode('👨‍👩‍👧', { addSpecialTokens: false });
  t.ok(emoji.filter((id) => /^<0x[0-9A-F]{2}>$/.test(mis.idToToken(id)!)).length >= 12, 'emoji via byte fallback');
  t.equal(mis.decode(emoji), '👨‍👩‍👧');
  t.same([...mis.tokenBytes(mis.tokenToId('<0xF0>')!)], [0xf0]);
  // byte-level tokenBytes: the GPT-2 alphabet maps back to raw bytes
  const q = qwen.encode('é 🙂', { addSpecialTokens: false });
  t.same(Buffer.concat(q.map((i) => Buffer.from(qwen.tokenBytes(i)))).toString('utf8'), 'é 🙂');
  // stream decoder holds back partial UTF-8 from byte-level tokens
  const sd = qwen.createStreamDecoder();
  const parts = q.map((id) => sd.push(id));
  t.ok(parts.some((p) => p === ''), 'an incomplete character is held back');
  t.equal(parts.join('') + sd.flush(), 'é 🙂');
});

t.test('a tokenizer.json the synchronous pipeline does not cover falls back to the async path', async (t) => {
  // Unigram model (SentencePiece unigram, e.g. T5-style vocabularies) over the Mistral fixture's pieces
  const src = JSON.parse(readFileSync(join(fixtures, 'mistral', 'tokenizer.json'), 'utf8'));
  const pieces = Object.entries(src.model.vocab as Record<string, number>).sort((a, b) => a[1] - b[1]);
  const uni = { ...src, model: { type: 'Unigram', unk_id: 0, byte_fallback: true, vocab: pieces.map(([p, id]) => [p, id < 300 ? 0 : -Math.log(id) - p.length * 0.1]) } };
  const dir = mkdtempSync(join(tmpdir(), 'loom-unigram-'));
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(uni));
  copyFileSync(join(fixtures, 'mistral', 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'));
  const tok = Tokenizer.fromDirSync(dir);
  t.equal(tok.syncEncode, false);
  t.match(tok.syncUnsupported, /Unigram/);
  t.throws(() => tok.encode('hi'), TokenizerError, 'encode() says to use encodeAsync()');
  t.equal(tok.bosId, 1);
  let mism = 0;
  for (const text of randomTexts(60, 5)) {
    const ref = (await tok.native.encode(text, null, { addSpecialTokens: true })).getIds();
    const got = await tok.encodeAsync(text);
    if (JSON.stringify(got) !== JSON.stringify(ref) && mism++ < 3) t.same(got, ref, `encodeAsync ${JSON.stringify(text)}`);
    const refDec = await tok.native.decode(got, true);
    if (tok.decode(got) !== refDec && mism++ < 3) t.equal(tok.decode(got), refDec, `decode ${JSON.stringify(text)}`);
    if (stream(tok, got, true) !== refDec && mism++ < 3) t.equal(stream(tok, got, true), refDec, `stream ${JSON.stringify(text)}`);
  }
  t.equal(mism, 0, 'no mismatches');
  const messages = [
    { role: 'user' as const, content: [{ type: 'text', text: 'A long shared context.', cache_control: { type: 'ephemeral' as const } }] },
    { role: 'assistant' as const, content: 'Sure.' },
    { role: 'user' as const, content: 'Question?' },
  ];
  t.throws(() => encodeChat(tok, messages), TokenizerError);
  const r = await encodeChatAsync(tok, messages);
  t.same(r.ids, (await tok.native.encode(r.text, null, { addSpecialTokens: false })).getIds(), 'text starts with <s>: no second BOS');
  t.equal(r.ids.filter((i) => i === 1).length, 1);
  t.equal(r.breakpointTokens.length, 1);
  const off = r.text.indexOf('context.') + 'context.'.length;
  t.same(r.ids.slice(0, r.breakpointTokens[0]), (await tok.encodeAsync(r.text.slice(0, off), { addSpecialTokens: false })).slice(0, r.breakpointTokens[0]));
  t.ok(r.breakpointTokens[0] > 3 && r.breakpointTokens[0] < r.ids.length);
});
