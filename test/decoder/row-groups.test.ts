// Decode batches of 16-32 rows per thread run each layer as one task per group of whole sequences (Model::step's
// row_groups): the logits must be those of one thread, which splits nothing. TinyStories-656k as stored (f32
// products) and converted to Q8_0 (block-quantized products, the 16- and 32-row kernels).
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { getThreads, setThreads } from '../../src/native/cpu.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, randomIds, shared } from './helpers.ts';

const src = join(shared, 'models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-groups-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
const q8Path = join(tmp, 'q8_0.gguf');
convertHfToGguf(src, q8Path, { outType: 'Q8_0' });
const prev = getThreads();
t.teardown(() => setThreads(prev));

const bits = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);

for (const [name, path] of [['f32', src], ['Q8_0', q8Path]] as const) {
  t.test(`${name}: a batch split into two groups of sequences gives one thread's logits`, async (t) => {
    const model = await loadDecoder(path, { kv: { memory: '16MiB' } });
    const V = model.config.vocabSize;
    // 32 rows: two groups of 16 (single tokens, and a few two- and three-token sequences: the attention's tiles);
    // 64 rows: two of 32; 40 rows of single tokens: 20 and 20
    const batches = [
      [...Array.from({ length: 26 }, (_, i) => randomIds(1, V, 10 + i)), randomIds(2, V, 1), randomIds(2, V, 2),
        randomIds(2, V, 3)],
      Array.from({ length: 64 }, (_, i) => randomIds(1, V, 100 + i)),
      Array.from({ length: 40 }, (_, i) => randomIds(1, V, 200 + i)),
    ];
    for (const seqs of batches) {
      const T = seqs.reduce((n, s) => n + s.length, 0);
      if (name === 'Q8_0' && T > 32) continue;  // one thread runs more than 32 rows through the prefill products
      setThreads(1);
      const one = await forwardAll(model.native, model.config, seqs);
      setThreads(2);
      const two = await forwardAll(model.native, model.config, seqs);
      const same = one.every((o, i) => bits(o).equals(bits(two[i])));
      t.ok(same, `${T} rows in ${seqs.length} sequences: 2 threads give the bits of 1`);
    }
    await model.close?.();
  });
}
