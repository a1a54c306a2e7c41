// A fresh encoder's word pooling (issue 17): `loom init-encoder` and the service's fresh bases write
// token_pooling "mean" unless told otherwise (a word's vector is the mean of its pieces; the first piece, which
// GLiNER2's pretrained checkpoints pool, found unseen CoNLL-2003 names less well in a fresh model:
// docs/training.md, "Word pooling"); the choice is kept, and a bad one is refused, from the library and the CLI.
import t from 'tap';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FRESH_TOKEN_POOLING, initEncoder, type EncoderInitConfig } from '../../src/training/encoder/init.ts';
import { main as initEncoderCli } from '../../src/cli/init-encoder.ts';

const TEXTS = ['Tim Cook visited Apple Park in Cupertino', 'the new phone is great', 'NASA and the UN met in Geneva'];
const TINY: EncoderInitConfig = {
  hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300,
};
const root = mkdtempSync(join(tmpdir(), 'loom-init-pooling-'));
const pooling = (dir: string) => JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).token_pooling;

t.test('a fresh model pools the mean of its pieces unless told otherwise', async (t) => {
  t.equal(FRESH_TOKEN_POOLING, 'mean');
  initEncoder(join(root, 'default'), TINY, TEXTS);
  t.equal(pooling(join(root, 'default')), 'mean');
  for (const p of ['first', 'max'] as const) {
    initEncoder(join(root, p), { ...TINY, token_pooling: p }, TEXTS);
    t.equal(pooling(join(root, p)), p);
  }
  t.throws(
    () => initEncoder(join(root, 'bad'), { ...TINY, token_pooling: 'last' as never }, TEXTS),
    /token_pooling must be one of first, mean, max/,
  );
});

t.test('loom init-encoder --token-pooling', async (t) => {
  const data = join(root, 'train.jsonl');
  writeFileSync(data, TEXTS.map((text) => JSON.stringify({ text, entities: [] })).join('\n') + '\n');
  const config = join(root, 'tiny.json');
  writeFileSync(config, JSON.stringify(TINY));
  const quiet = async (args: string[]) => {
    const [log, err] = [console.log, console.error];
    const said: string[] = [];
    console.log = console.error = (m: string) => void said.push(String(m));
    try {
      return { rc: await initEncoderCli(args), said: said.join('\n') };
    } finally {
      [console.log, console.error] = [log, err];
    }
  };
  const base = ['--config', config, '--data', data];
  t.equal((await quiet([...base, '--out', join(root, 'cli-default')])).rc, 0);
  t.equal(pooling(join(root, 'cli-default')), 'mean');
  t.equal((await quiet([...base, '--out', join(root, 'cli-first'), '--token-pooling', 'first'])).rc, 0);
  t.equal(pooling(join(root, 'cli-first')), 'first');
  const bad = await quiet([...base, '--out', join(root, 'cli-bad'), '--token-pooling', 'last']);
  t.equal(bad.rc, 2);
  t.match(bad.said, /--token-pooling takes first, mean, max/);
});
