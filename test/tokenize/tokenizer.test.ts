import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');
const tsDir = join(shared, 'models/tinystories-656k');
const mzDir = join(shared, 'models/minueza-32m-ultrachat-tokenizer');
const cases = JSON.parse(readFileSync(join(shared, 'goldens/tinystories-656k/cases.json'), 'utf8'));

t.test('tinystories: golden input_ids, edge cases and decodes', async (t) => {
  const tok = await Tokenizer.fromDir(tsDir);
  t.equal(tok.vocabSize, 2048);
  t.equal(tok.bosId, 1);
  t.same(tok.eosIds, [2]);
  t.equal(tok.padId, 0);
  t.equal(tok.addBosToken, true);
  t.same([...tok.specialIds].sort(), [0, 1, 2]);
  for (const p of cases.prompts) {
    t.same(tok.encode(p.text), p.input_ids, `input_ids of ${JSON.stringify(p.text)}`);
    t.same(tok.encode(p.text, { addSpecialTokens: false }), p.input_ids.slice(1));
    const all = [...p.input_ids, ...p.greedy.new_ids];
    t.equal(tok.decode(p.greedy.new_ids), p.greedy.decoded_new, `decoded_new ${p.name}`);
    t.equal(tok.decode(all), p.greedy.decoded_full, `decoded_full ${p.name}`);
    // streaming reproduces the full decode
    const sd = tok.createStreamDecoder();
    let s = '';
    for (const id of all) s += sd.push(id);
    s += sd.flush();
    t.equal(s, p.greedy.decoded_full, `stream decode ${p.name}`);
  }
  for (const c of cases.tokenizer_edge_cases) t.same(tok.encode(c.text), c.tokenizer_json_ids, `edge case ${JSON.stringify(c.text)}`);
  t.equal(tok.idToToken(286), 'there▁was▁a▁');
  t.equal(tok.tokenToId('there▁was▁a▁'), 286);
  t.same([...tok.tokenBytes(286)], [...new TextEncoder().encode('there was a ')]);
  t.same([...tok.tokenBytes(3)], [10], 'byte-fallback token <0x0A> is a newline byte');
});

// Random texts: our synchronous pipeline must equal the native (async) tokenizers encode and decode.
function randomTexts(n: number, seed: number): string[] {
  let s = seed;
  const rnd = (): number => ((s = (s * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const words = ['Once', 'upon', 'a', 'time', ' ', '  ', '\n', '\t', 'é', 'ü', '🙂', '東京', 'Lily', 'park,', 'said.', '"Hi!"', '<|im_start|>', '<|im_end|>', '<s>', '<|start_story|>', '123', '3.14', 'ﬁ', '\u00a0', 'there was a ', 'x<y', '{"a": [1, 2]}'];
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    let str = '';
    const k = 1 + Math.floor(rnd() * 12);
    for (let j = 0; j < k; j++) str += words[Math.floor(rnd() * words.length)] + (rnd() < 0.5 ? ' ' : '');
    out.push(str);
  }
  out.push('', ' ', '  leading', 'trailing  ', 'a'.repeat(500));
  return out;
}

for (const [name, dir] of [['tinystories', tsDir], ['minueza (Mistral SentencePiece BPE + ChatML added tokens)', mzDir]]) {
  t.test(`${name}: sync encode/decode equal the native tokenizers library`, async (t) => {
    const tok = await Tokenizer.fromDir(dir);
    let mism = 0;
    for (const text of randomTexts(150, 7)) {
      for (const add of [true, false]) {
        const ref = (await tok.native.encode(text, null, { addSpecialTokens: add })).getIds();
        const got = tok.encode(text, { addSpecialTokens: add });
        if (JSON.stringify(ref) !== JSON.stringify(got)) {
          if (mism++ < 5) t.same(got, ref, `encode ${JSON.stringify(text)} add=${add}`);
        }
      }
      const ids = tok.encode(text, { addSpecialTokens: false }).filter((i) => !tok.specialIds.has(i));
      const refDec = await tok.native.decode(ids, false);
      if (tok.decode(ids) !== refDec && mism++ < 5) t.equal(tok.decode(ids), refDec, `decode ${JSON.stringify(text)}`);
      const sd = tok.createStreamDecoder();
      let s = '';
      for (const id of ids) s += sd.push(id);
      s += sd.flush();
      if (s !== refDec && mism++ < 5) t.equal(s, refDec, `stream ${JSON.stringify(text)}`);
    }
    t.equal(mism, 0, 'no mismatches');
  });
}

t.test('minueza: special tokens, eos, chat markers', async (t) => {
  const tok = await Tokenizer.fromDir(mzDir);
  t.equal(tok.vocabSize, 32002);
  t.equal(tok.bosId, 1);
  t.same(tok.eosIds, [32000]);
  t.equal(tok.padId, 2);
  t.equal(tok.addBosToken, false);
  t.ok(tok.chatTemplate?.includes('<|im_start|>'));
  const ids = tok.encode('<|im_start|>user\nHi<|im_end|>');
  t.equal(ids[0], 32001);
  t.equal(ids[ids.length - 1], 32000);
  t.equal(tok.decode(ids), 'user\nHi');
  t.equal(tok.decode(ids, { skipSpecialTokens: false }).includes('<|im_start|>'), true);
  // streaming holds back an incomplete UTF-8 sequence from byte-fallback tokens
  const emoji = tok.encode('🙂', { addSpecialTokens: false }).filter((i) => i >= 3 && i < 3 + 256);
  if (emoji.length > 1) {
    const sd = tok.createStreamDecoder();
    t.equal(sd.push(emoji[0]), '', 'first byte held back');
  }
  t.same([...tok.tokenBytes(tok.tokenToId('<0xF0>')!)], [0xf0]);
  t.same([...tok.tokenBytes(tok.tokenToId('▁the')!)], [...new TextEncoder().encode(' the')]);
});

t.test('tokenCountAt maps a char offset to the tokens fully before it', async (t) => {
  const tok = await Tokenizer.fromDir(mzDir);
  const text = '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n';
  const full = tok.encode(text);
  const off = text.indexOf('<|im_start|>user');
  const k = tok.tokenCountAt(text, off);
  t.same(full.slice(0, k), tok.encode(text.slice(0, off)), 'boundary at a special token: prefix tokens exactly');
  // a boundary inside a word: the straddling token is excluded
  const mid = text.indexOf('helpful') + 3;
  const k2 = tok.tokenCountAt(text, mid);
  t.ok(k2 <= tok.encode(text.slice(0, mid)).length);
  t.same(full.slice(0, k2), tok.encode(text.slice(0, mid)).slice(0, k2));
});

t.test('fromJson: an in-memory tokenizer.json with tokenizer_config / generation_config fields', async (t) => {
  const dir = await Tokenizer.fromDir(mzDir);
  const text = readFileSync(join(mzDir, 'tokenizer.json'), 'utf8');
  const config = JSON.parse(readFileSync(join(mzDir, 'tokenizer_config.json'), 'utf8'));
  const tok = Tokenizer.fromJson(text, { source: 'in memory', tokenizerConfig: config, generationConfig: { eos_token_id: [32000, 2] } });
  for (const s of ['Hello  world', '<|im_start|>user\nHi<|im_end|>', '東京 🙂 12345']) t.same(tok.encode(s), dir.encode(s), JSON.stringify(s));
  t.equal(tok.chatTemplate, dir.chatTemplate);
  t.same([tok.bosToken, tok.eosToken, tok.addBosToken], [dir.bosToken, dir.eosToken, dir.addBosToken]);
  t.same(tok.eosIds.sort(), [2, 32000], 'eos_token and generation eos ids');
  t.same(Tokenizer.fromJson(JSON.parse(text)).encode('Hello'), dir.encode('Hello'), 'object form, no config');
  t.throws(() => Tokenizer.fromJson('{not json', { source: 'x.gguf' }), /x\.gguf: invalid JSON/);
  t.same(dir.postProcessorTokens(), { before: [], after: [] }, 'minueza adds no special tokens');
  t.same((await Tokenizer.fromDir(tsDir)).postProcessorTokens(), { before: [1], after: [] }, 'tinystories adds BOS');
});
