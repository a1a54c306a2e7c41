// Piece dropout (subword regularization, src/training/encoder/piece-dropout.ts): a text word is segmented again
// from the model's own vocabulary, each longer piece passed over at the rate; every segmentation spells the word,
// words the tokenizer would split or cannot spell keep its pieces, the same stream gives the same pieces, and the
// served input (no resegment) is the tokenizer's.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initEncoder, InitRng } from '../../src/training/encoder/init.ts';
import { pieceDropout } from '../../src/training/encoder/piece-dropout.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { formatInput } from '../../src/models/encoder/format.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const root = mkdtempSync(join(tmpdir(), 'loom-piece-dropout-'));
t.teardown(() => rmSync(root, { recursive: true, force: true }));
const TEXTS = Array.from({ length: 40 }, (_, i) =>
  `Washington met Wellington in Washington ${i % 2 ? 'and Wells' : 'with Ingrid'} on day ${i}`);
initEncoder(root, {
  hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 400,
}, TEXTS);
const tok = new EncoderTokenizer(join(root, 'tokenizer.json'));
const spell = (ids: Int32Array) => [...ids].map((id) => tok.idToToken(id)!);

t.test('every segmentation spells the word from vocabulary pieces', async (t) => {
  const drop = pieceDropout(tok, 0.5);
  const [pieces] = await tok.pieces(['washington']);
  t.same(spell(pieces!), ['washington'], 'a whole word of the vocabulary');
  const rng = new InitRng(7);
  const seen = new Map<string, number>();
  for (let i = 0; i < 400; i++) {
    const p = spell(drop('washington', pieces!, rng)).join(' ');
    seen.set(p, (seen.get(p) ?? 0) + 1);
  }
  for (const p of seen.keys()) {
    const s = p.split(' ');
    t.ok(s.every((x, k) => (k === 0) !== x.startsWith('##')), `${p}: the first piece starts the word, the rest go on`);
    t.equal(s.map((x) => x.replace(/^##/, '')).join(''), 'washington');
  }
  // this vocabulary has the word whole and its letters: passed over at 0.5, the word comes half the time
  const whole = seen.get('washington') ?? 0;
  t.ok(whole > 160 && whole < 240, `the whole word ${whole} times of 400`);
  t.ok(seen.size >= 2, `other segmentations: ${[...seen.keys()].join(' | ')}`);
});

t.test('rate 0, words the pre-tokenizer splits and unknown characters keep the tokenizer\'s pieces', async (t) => {
  const rng = new InitRng(1);
  for (const w of ['washington', 'wells-ingrid', 'zürich', '42']) {
    const [pieces] = await tok.pieces([w]);
    t.same(pieceDropout(tok, 0)(w, pieces!, rng), pieces, `${w} at rate 0`);
    if (w !== 'washington' && w !== '42') {
      for (let i = 0; i < 20; i++) t.same(pieceDropout(tok, 0.9)(w, pieces!, rng), pieces, w);
    }
  }
});

t.test('the same stream gives the same pieces; serving never drops', async (t) => {
  const drop = pieceDropout(tok, 0.3);
  const text = 'Washington met Wellington in Washington and Wells';
  const run = async (seed: number) => {
    const rng = new InitRng(seed);
    const f = await formatInput(tok, text, { entities: [{ name: 'person' }], structures: [], relations: [],
      classifications: [] } as never, { resegment: (w, p) => drop(w, p, rng) });
    return [...f.ids];
  };
  t.same(await run(3), await run(3));
  const plain = [...(await formatInput(tok, text, { entities: [{ name: 'person' }], structures: [], relations: [],
    classifications: [] } as never)).ids];
  const draws = await Promise.all([1, 2, 3, 4, 5, 6].map(run));
  t.ok(draws.some((d) => d.length > plain.length), 'some draws split words');
  for (const d of draws) t.same(d.slice(0, plain.indexOf(tok.tokenToId('[SEP_TEXT]')!) + 1),
    plain.slice(0, plain.indexOf(tok.tokenToId('[SEP_TEXT]')!) + 1), 'the prompt is never resegmented');
});

t.test('a tokenizer that is not WordPiece is refused', async (t) => {
  const golden = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
  const unigram = new EncoderTokenizer(join(golden, 'tokenizer.json'));
  t.equal(unigram.wordPiecePrefix(), null);
  t.equal(tok.wordPiecePrefix(), '##');
  t.throws(() => pieceDropout(unigram, 0.25), { name: 'TrainingConfigError', message: /WordPiece/ });
});

t.test('NER training segments its texts again, reproducibly from the seed', async (t) => {
  const records: DataRecord[] = TEXTS.map((text) => ({
    kind: 'ner', text, entities: [{ start: 0, end: 10, label: 'location', text: 'Washington' },
      { start: 15, end: 25, label: 'person', text: 'Wellington' }],
  }));
  const losses: number[][] = [];
  for (const [name, pieces] of [['a', 0.3], ['b', 0.3], ['whole', 0]] as const) {
    const seen: number[] = [];
    await trainEncoder({
      base_model: root, output_dir: join(root, `run-${name}`), train_data: records, validation_data_percentage: 0,
      nr_epochs: 2, batch_size: 8, learning_rate: 5e-3, encoder_learning_rate: 1e-3, seed: 3, threads: 1,
      piece_dropout: pieces, selection_metric: 'loss',
    }, { onProgress: (e) => void seen.push(e.loss) });
    losses.push(seen);
  }
  t.equal(losses[0]!.length, 10);
  t.same(losses[0], losses[1], 'the same losses at every step');
  t.not(losses[0]!.join(), losses[2]!.join(), 'other pieces than the tokenizer\'s');
});
