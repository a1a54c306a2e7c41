import t from 'tap';
import { scoreSpans, scoreClassification } from '../../src/training/metrics.ts';

t.test('strict span F1 needs exact start, end and label', async (t) => {
  const gold = [[{ start: 0, end: 5, label: 'person' }, { start: 10, end: 15, label: 'location' }], [{ start: 3, end: 7, label: 'person' }]];
  const pred = [
    [{ start: 0, end: 5, label: 'person' }, { start: 10, end: 14, label: 'location' }], // one right, one boundary error
    [{ start: 3, end: 7, label: 'location' }], // wrong label
  ];
  const s = scoreSpans(gold, pred);
  t.equal(s.tp, 1);
  t.equal(s.fp, 2);
  t.equal(s.fn, 2);
  t.equal(s.precision, 1 / 3);
  t.equal(s.recall, 1 / 3);
  t.equal(s.per_label.person.precision, 1);
  t.equal(s.per_label.person.recall, 0.5);
  t.equal(s.per_label.location.f1, 0);
  t.equal(s.sample_count, 2);
});

t.test('perfect and empty predictions', async (t) => {
  const gold = [[{ start: 1, end: 2, label: 'x' }], []];
  t.equal(scoreSpans(gold, gold).f1, 1);
  const none = scoreSpans(gold, [[], []]);
  t.equal(none.f1, 0);
  t.equal(none.recall, 0);
  t.equal(none.fn, 1);
  t.throws(() => scoreSpans(gold, [[]]), /2 gold examples but 1/);
});

t.test('classification accuracy and macro-F1', async (t) => {
  const s = scoreClassification([['a'], ['a'], ['b'], ['c']], [['a'], ['b'], ['b'], ['c']]);
  t.equal(s.accuracy, 0.75);
  // a: p=1 r=.5 f1=2/3 ; b: p=.5 r=1 f1=2/3 ; c: 1
  t.ok(Math.abs(s.macro_f1 - (2 / 3 + 2 / 3 + 1) / 3) < 1e-12);
  const m = scoreClassification([['a', 'b'], ['c']], [['a'], ['c', 'b']]);
  t.equal(m.accuracy, 0);
  t.equal(m.per_label.b.tp, 0);
  t.ok(Math.abs(m.f1 - 2 * (2 / 3) * (2 / 3) / (4 / 3)) < 1e-12);
});
