// Word features of fresh encoders (src/models/encoder/word-features.ts): the shape classes, the hashed suffix-3,
// prefix-3 and shape-string buckets, their row layout in the table and their config.json form.
import t from 'tap';
import {
  featureCols, featureRows, parseWordFeatures, parseWordFeatureSpec, prefixBucket, shapeBucket, shapeClass,
  shapeString, suffixBucket, wordFeatureIds, wordFeaturesJson, SHAPE_CLASSES, WordFeatureConfigError,
} from '../../src/models/encoder/word-features.ts';

t.test('shape strings are spaCy\'s: X, x, d, other characters kept, runs cut to 4', async (t) => {
  const cases: [string, string][] = [
    ['Washington', 'Xxxxx'], ['U.S.', 'X.X.'], ['12.50', 'dd.dd'], ['iPhone', 'xXxxxx'], ['EU', 'XX'],
    ['a', 'x'], ["McDonald's", "XxXxxxx'x"], ['2-1', 'd-d'], ['1999', 'dddd'], ['100000', 'dddd'], ['Zürich', 'Xxxxx'],
  ];
  for (const [w, s] of cases) t.equal(shapeString(w), s, w);
});

t.test('buckets are in range, case-blind for prefix and suffix, and tell shapes apart', async (t) => {
  for (const w of ['Washington', 'washington', 'WASHINGTON', 'x', '', '1999']) {
    for (const f of [suffixBucket, prefixBucket, shapeBucket]) {
      const b = f(w, 97);
      t.ok(Number.isInteger(b) && b >= 0 && b < 97, `${f.name}(${w}) = ${b}`);
    }
  }
  t.equal(prefixBucket('Washington', 1024), prefixBucket('wasp', 1024), 'the first three letters, lower-cased');
  t.equal(suffixBucket('Washington', 1024), suffixBucket('TON', 1024), 'the last three letters, lower-cased');
  t.equal(shapeBucket('Washington', 1 << 20), shapeBucket('Berlinville', 1 << 20), 'one shape string, one bucket');
  t.not(shapeBucket('Washington', 1 << 20), shapeBucket('WASHINGTON', 1 << 20), 'Xxxxx is not XXXX');
  t.equal(shapeClass('Washington'), shapeClass('Berlin'));
});

t.test('config: rows in order shape, suffix, prefix, shape string; older configs read as before', async (t) => {
  const wf = parseWordFeatures({ shape: true, suffix_buckets: 16, prefix_buckets: 8, shape_buckets: 4 })!;
  t.equal(featureRows(wf), SHAPE_CLASSES.length + 16 + 8 + 4);
  t.equal(featureCols(wf), 4);
  t.same(wordFeaturesJson(wf), { shape: true, suffix_buckets: 16, prefix_buckets: 8, shape_buckets: 4 });
  const old = parseWordFeatures({ shape: true, suffix_buckets: 0 })!;
  t.equal(featureRows(old), SHAPE_CLASSES.length);
  t.equal(featureCols(old), 1);
  t.same(wordFeaturesJson(old), { shape: true, suffix_buckets: 0 }, 'no new keys for a model without them');
  t.equal(parseWordFeatures({ shape: false, suffix_buckets: 0, prefix_buckets: 0 }), null);
  t.throws(() => parseWordFeatures({ shape: true, prefix_buckets: -1 }), WordFeatureConfigError);
  t.throws(() => parseWordFeatures({ shape: true, shape_buckets: 1.5 }), WordFeatureConfigError);
  t.same(parseWordFeatureSpec('shape,suffix:1024,prefix:512,shapes:64'),
    { shape: true, suffix_buckets: 1024, prefix_buckets: 512, shape_buckets: 64 });
  t.throws(() => parseWordFeatureSpec('shapes:0'), WordFeatureConfigError);
  t.throws(() => parseWordFeatureSpec('prefix'), WordFeatureConfigError);
});

t.test('every piece of a word gets the word\'s rows; prompt pieces get none', async (t) => {
  const wf = parseWordFeatures({ shape: true, suffix_buckets: 16, prefix_buckets: 8, shape_buckets: 4 })!;
  // a prompt of 2 pieces, then "Paris" (2 pieces) and "is" (1 piece)
  const f = {
    text: 'Paris is', ids: new Int32Array(5), prefix: ['[P]', 'x'], words: ['paris', 'is'], start: [0, 6], end: [5, 8],
    wordPos: new Int32Array([0, 1, 2, 4]), wordEnd: new Int32Array([1, 2, 4, 5]),
  };
  const ids = wordFeatureIds(f, wf);
  const K = 4;
  t.same([...ids.slice(0, 2 * K)], new Array(2 * K).fill(-1), 'prompt pieces');
  const paris = [shapeClass('Paris'), 8 + suffixBucket('Paris', 16), 24 + prefixBucket('Paris', 8),
    32 + shapeBucket('Paris', 4)];
  t.same([...ids.slice(2 * K, 3 * K)], paris);
  t.same([...ids.slice(3 * K, 4 * K)], paris, 'the second piece of the word');
  t.same([...ids.slice(4 * K, 5 * K)], [shapeClass('is'), 8 + suffixBucket('is', 16), 24 + prefixBucket('is', 8),
    32 + shapeBucket('is', 4)]);
});
