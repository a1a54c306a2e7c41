// Decoder LoRA SFT end to end on the real tinystories-656k checkpoint: assistant-only labels, loss
// goes down, the PEFT adapter is read back by the runtime's adapter loader and changes the logits
// exactly as the trained graph does.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { readPeftAdapter } from '../../src/runtime/adapters.ts';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';
import { encodeChat } from '../../src/tokenize/chat-template.ts';
import { chatToSequence, packSequences, trainDecoder } from '../../src/training/decoder-trainer.ts';
import { DecoderTrainGraph } from '../../src/training/native.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const base = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-sft-'));
const story = 'Once upon a time there was a little cat. The cat liked to play with a red ball.';
const records: DataRecord[] = Array.from({ length: 16 }, (_, i) => ({
  kind: 'chat',
  messages: [{ role: 'user', content: `Tell me story ${i % 4}.` }, { role: 'assistant', content: story }],
}));

t.test('assistant tokens only carry labels', async (t) => {
  const tok = Tokenizer.fromDirSync(base);
  const s = chatToSequence(tok, [{ role: 'user', content: 'Hi there.' }, { role: 'assistant', content: story }], 512)!;
  const trained = s.ids.filter((_, i) => s.train[i]);
  t.ok(trained.length > 0 && trained.length < s.ids.length, 'some but not all tokens are trained');
  t.match(tok.decode(trained), /little cat/);
  t.notMatch(tok.decode(trained), /Hi there/);
  const b = packSequences([s, s]);
  t.equal(b.seqOff[2], 2 * s.ids.length);
});

t.test('the tokens before a reply are the tokens the server prompts with', async (t) => {
  // tinystories' template ends the prompt with "Assistant:"; tokenized whole, ": The" is one token, so a model
  // trained on the whole text never sees the served prompt's last token (":") followed by its reply
  const tok = Tokenizer.fromDirSync(base);
  const chat = [
    { role: 'user' as const, content: 'What did the dog do?' },
    { role: 'assistant' as const, content: 'The dog ran to the park.' },
  ];
  const s = chatToSequence(tok, chat, 512)!;
  const first = s.train.indexOf(1);
  const served = encodeChat(tok, chat.slice(0, 1), { addGenerationPrompt: true }).ids;
  t.same(s.ids.slice(0, first), served, 'the untrained prefix is the served prompt, token for token');
  t.equal(tok.decode(s.ids.slice(first).filter((_, i) => s.train[first + i])).trim().startsWith('The dog ran'), true);
});

t.test('LoRA SFT lowers the loss and exports a PEFT adapter the runtime loads', async (t) => {
  const out = join(tmp, 'run');
  const res = await trainDecoder({ base_model: base, output_dir: out, train_data: records, nr_epochs: 8, batch_size: 4, learning_rate: 5e-3, lora_r: 4, lora_alpha: 8, seed: 1, validation_data_percentage: 0, lora_target_modules: ['q_proj', 'v_proj', 'down_proj'], threads: 1 });
  const losses = res.checkpoints.map((c) => c.train_loss);
  t.ok(losses[losses.length - 1] < losses[0] * 0.8, `train loss ${losses.map((l) => l.toFixed(3)).join(' → ')}`);
  const config = loadDecoderConfig(base);
  const ad = readPeftAdapter(res.final_checkpoint, config);
  t.equal(ad.r, 4);
  t.equal(ad.scale, 2);
  t.equal(ad.modules.length, config.numLayers * 3);
  t.same(ad.targetModules, ['q_proj', 'v_proj', 'down_proj']);
  // The adapter as the runtime reads it reproduces the trained model's logits (and differs from the base).
  const ck = SafetensorsCheckpoint.open(base);
  const tensors: Record<string, Float32Array> = {};
  for (const n of ck.names()) tensors[n] = toFloat32(ck.get(n));
  const tok = Tokenizer.fromDirSync(base);
  const seq = chatToSequence(tok, (records[0] as unknown as { messages: never[] }).messages, 512)!;
  const batch = packSequences([seq]);
  const withAd = DecoderTrainGraph.create(config, tensors, ad.modules.map((m) => ({ ...m, dropout: 0 })));
  const noAd = DecoderTrainGraph.create(config, tensors, []);
  const a = await withAd.step(batch, { backward: false, wantLogits: true });
  const b = await noAd.step(batch, { backward: false, wantLogits: true });
  t.ok(a.loss < b.loss, `adapter loss ${a.loss.toFixed(3)} < base loss ${b.loss.toFixed(3)}`);
  t.ok(Math.abs(a.loss - res.train_loss) < 0.5 * b.loss, 'close to the final training loss');
  JSON.parse(readFileSync(join(res.final_checkpoint, 'adapter_config.json'), 'utf8'));
});
