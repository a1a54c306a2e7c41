// token_pooling "mean" / "max" (spec §3.5): a word's embedding is the mean / elementwise max of its
// sub-word states instead of the first piece's state. The golden checkpoint is copied with its
// config changed; the encoder states must not change, the word rows must be the reductions over each
// word's pieces (computed here from the tokenizer's pieces of every word, independently of the
// formatter's bookkeeping), and extraction must run end to end.
import t from 'tap';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';

const golden = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');

function withPooling(mode: string): string {
  const dir = mkdtempSync(join(tmpdir(), `loom-pool-${mode}-`));
  cpSync(golden, dir, { recursive: true });
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  cfg.token_pooling = mode;
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}

t.test('mean and max token pooling', async (t) => {
  const text = 'Internationalization experts from Kraków and Zürich met unbelievably early.';
  const schema = ['person', 'location'];
  const first = await loadEncoder(golden);
  t.equal(first.info.tokenPooling, 'first');
  const ref = await first.debugRun(text, schema);
  const D = first.info.hiddenSize;

  // pieces per text token, from the tokenizer directly
  const f = ref.formatted;
  const textTokens = [...f.prefix, ...f.words];
  const pieces = await first.tokenizer.pieces(textTokens);
  const nPieces = pieces.map((p) => p.length);
  t.ok(nPieces.some((n) => n > 1), 'the text has words of several pieces');
  const textStart = f.ids.length - nPieces.reduce((a, c) => a + c, 0);

  for (const mode of ['mean', 'max'] as const) {
    const dir = withPooling(mode);
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const m = await loadEncoder(dir);
    t.equal(m.info.tokenPooling, mode);
    const { inter } = await m.debugRun(text, schema);
    t.same(Array.from(inter.ids), Array.from(ref.inter.ids), `${mode}: same input ids`);
    t.same(inter.hidden, ref.inter.hidden, `${mode}: pooling does not change the encoder states`);
    let pos = textStart;
    let multi = 0;
    let maxErr = 0;
    nPieces.forEach((n, w) => {
      const got = inter.wordEmbeddings.subarray(w * D, (w + 1) * D);
      for (let d = 0; d < D; d++) {
        let want = inter.hidden[pos * D + d];
        for (let p = pos + 1; p < pos + Math.max(n, 1); p++) {
          const h = inter.hidden[p * D + d];
          want = mode === 'mean' ? want + h : Math.max(want, h);
        }
        if (mode === 'mean') want /= Math.max(n, 1);
        maxErr = Math.max(maxErr, Math.abs(got[d] - want));
      }
      if (n > 1) {
        multi++;
        const firstRow = ref.inter.wordEmbeddings.subarray(w * D, (w + 1) * D);
        t.ok(got.some((x, d) => x !== firstRow[d]), `${mode}: word ${w} (${n} pieces) differs from first-piece pooling`);
      }
      pos += n;
    });
    t.ok(multi > 0);
    t.ok(maxErr < 1e-5, `${mode}: word rows are the ${mode} over their pieces (max error ${maxErr})`);
    const r = await m.extract(text, schema, { threshold: 0.05 });
    for (const list of Object.values(r.entities!))
      for (const e of list as { text: string; start: number; end: number }[]) t.equal(text.slice(e.start, e.end), e.text);
  }

  // an unknown value behaves as "first", like the reference
  const odd = withPooling('weighted');
  t.teardown(() => rmSync(odd, { recursive: true, force: true }));
  t.equal((await loadEncoder(odd)).info.tokenPooling, 'first');
});
