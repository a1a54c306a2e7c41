// GGUF files alone (no tokenizer.json beside them) load with the vocabulary embedded in the metadata and
// behave like the Hugging Face folder they were converted from: same prompt ids (text and chat messages), same
// greedy tokens and text. TinyStories is a real model; the chat cases pair tiny golden weights with the
// Qwen2.5 / SmolLM2 / Llama 3 fixture tokenizers (and their chat templates).
import t, { type Test } from 'tap';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgufFile, gv, type GgufValue } from '../../src/formats/gguf.ts';
import { writeGguf } from '../../src/formats/gguf-writer.ts';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { openGgufDecoder } from '../../src/models/decoder/gguf-source.ts';
import { loadDecoder, type DecoderModel } from '../../src/runtime/generate.ts';
import { encodeChat, type ChatMessage } from '../../src/tokenize/chat-template.ts';
import { goldens, shared } from './helpers.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-gguf-vocab-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
const tokFixtures = join(import.meta.dirname, '..', 'fixtures', 'tokenizers');

/** Converts an HF folder to `<tmp>/<name>/model.gguf`, alone in its folder. */
function ggufAlone(t: Test, dir: string, name: string): string {
  const d = join(tmp, name);
  mkdirSync(d);
  const out = join(d, 'model.gguf');
  convertHfToGguf(dir, out, { outType: 'F32' });
  t.same(readdirSync(d), ['model.gguf'], `${name}: no tokenizer files beside the GGUF`);
  return out;
}

async function greedy(m: DecoderModel, req: { prompt?: string; messages?: ChatMessage[] }, n: number) {
  const r = await m.generate({ ...req, max_tokens: n, temperature: 0, stop_at_eos: false }).result;
  return { ids: r.tokenIds, text: r.text, promptTokens: r.usage.prompt_tokens };
}

t.test('TinyStories (SentencePiece) from the GGUF alone: same prompt ids and greedy continuation as the folder', async (t) => {
  const dir = join(shared, 'models/tinystories-656k');
  const path = ggufAlone(t, dir, 'tinystories');
  const opened = await openGgufDecoder(path);
  t.equal(opened.tokenizerFrom, 'embedded', 'embedded vocabulary used');
  t.same(opened.tokenizerNotes, [], 'nothing assumed');
  const folder = await loadDecoder(dir, { kv: { memory: '4MiB' } });
  const gguf = await loadDecoder(path, { kv: { memory: '4MiB' } });
  for (const prompt of ['Once upon a time, there was a', 'Lily and Tom went to the park. They saw 3 dogs and 12 birds.\n\nTom said,']) {
    t.same(gguf.tokenizer.encode(prompt), folder.tokenizer.encode(prompt), `prompt ids of ${JSON.stringify(prompt)}`);
    const a = await greedy(folder, { prompt }, 24), b = await greedy(gguf, { prompt }, 24);
    t.same(b, a, `greedy tokens and text (${a.ids.length} tokens)`);
  }
  // with EOS honoured: the same stop
  const prompt = 'Once upon a time';
  const a = await folder.generate({ prompt, max_tokens: 200, temperature: 0 }).result, b = await gguf.generate({ prompt, max_tokens: 200, temperature: 0 }).result;
  t.same([b.tokenIds, b.finish_reason], [a.tokenIds, a.finish_reason], `stops the same way (${a.finish_reason} after ${a.tokenIds.length})`);
  t.same(gguf.generation.eosTokenIds, [2], 'eos from tokenizer.ggml.eos_token_id');
  t.equal(gguf.generation.bosTokenId, 1, 'bos from tokenizer.ggml.bos_token_id');
});

for (const [fam, golden] of [['qwen2.5', 'qwen2-tiny'], ['smollm2', 'llama-tiny'], ['llama3', 'llama3-rope-tiny']] as const) {
  t.test(`${fam} (byte-level) from the GGUF alone: chat template, prompt ids and greedy tokens as the folder`, async (t) => {
    const dir = mkdtempSync(join(tmp, `${fam}-src-`));
    for (const f of ['config.json', 'model.safetensors']) copyFileSync(join(goldens, golden, f), join(dir, f));
    for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(tokFixtures, fam, f), join(dir, f));
    const path = ggufAlone(t, dir, fam);
    const folder = await loadDecoder(dir, { kv: { memory: '4MiB' } });
    const gguf = await loadDecoder(path, { kv: { memory: '4MiB' } });
    t.ok(gguf.tokenizer.chatTemplate, 'chat template read from tokenizer.chat_template');
    t.equal(gguf.tokenizer.chatTemplate, folder.tokenizer.chatTemplate, 'same template as tokenizer_config.json');
    t.ok(gguf.info.hasChatTemplate, 'model info: hasChatTemplate');
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Count: 1 2 3, then say <|im_start|> literally? Très bien 🙂' },
    ];
    t.same(encodeChat(gguf.tokenizer, messages).ids, encodeChat(folder.tokenizer, messages).ids, 'chat prompt ids');
    const a = await greedy(folder, { messages }, 12), b = await greedy(gguf, { messages }, 12);
    t.same(b, a, `greedy tokens and text from chat messages (${a.promptTokens} prompt tokens)`);
    const p = await greedy(folder, { prompt: 'The answer is 42.\n\tNext:' }, 8), q = await greedy(gguf, { prompt: 'The answer is 42.\n\tNext:' }, 8);
    t.same(q, p, 'greedy tokens from a text prompt');
    for (const id of new Set([...folder.tokenizer.eosIds, ...folder.generation.eosTokenIds])) t.ok(gguf.tokenizer.eosIds.includes(id) || gguf.generation.eosTokenIds.includes(id), `eos ${id} kept`);
  });
}

t.test('a tokenizer.json beside the file is still used; an explicit tokenizerDir must have one', async (t) => {
  const dir = join(shared, 'models/tinystories-656k');
  const d = join(tmp, 'with-tokenizer');
  mkdirSync(d);
  convertHfToGguf(dir, join(d, 'model.gguf'));
  copyFileSync(join(dir, 'tokenizer.json'), join(d, 'tokenizer.json'));
  const r = await openGgufDecoder(join(d, 'model.gguf'));
  t.equal(r.tokenizerFrom, d, 'tokenizer.json beside the file');
  const alone = join(tmp, 'tinystories', 'model.gguf');
  t.equal((await openGgufDecoder(alone, { tokenizerDir: dir })).tokenizerFrom, dir, 'tokenizerDir');
  await t.rejects(openGgufDecoder(alone, { tokenizerDir: tmp }), /no tokenizer\.json there/);
});

t.test('a GGUF whose tokenizer model is not supported is refused with a clear message', async (t) => {
  const g = new GgufFile(join(tmp, 'tinystories', 'model.gguf'));
  const md: Record<string, GgufValue> = {};
  for (const [k, v] of g.metadata) md[k] = v;
  md['tokenizer.ggml.model'] = gv.str('t5');
  const tensors: Record<string, { type: number; shape: number[]; data: Uint8Array }> = {};
  for (const [n, ti] of g.tensors) tensors[n] = { type: ti.type, shape: ti.shape, data: ti.bytes };
  const d = join(tmp, 't5');
  mkdirSync(d);
  writeGguf(join(d, 'model.gguf'), { metadata: md, tensors });
  await t.rejects(loadDecoder(join(d, 'model.gguf'), { kv: { memory: '4MiB' } }), /GGUF tokenizer model "t5" is not supported \(only "gpt2", byte-level BPE, and "llama", SentencePiece\); put the model's tokenizer\.json next to the file/);
});
