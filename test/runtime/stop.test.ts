import t from 'tap';
import { StopMatcher } from '../../src/runtime/stop.ts';

function run(stops: string[], deltas: string[]): { out: string; stopped: boolean; emits: string[] } {
  const m = new StopMatcher(stops);
  let out = '';
  const emits: string[] = [];
  for (const d of deltas) {
    const r = m.push(d);
    out += r.emit;
    emits.push(r.emit);
    if (r.stopped) return { out, stopped: true, emits };
  }
  out += m.flush();
  return { out, stopped: false, emits };
}

t.test('stop string split across deltas is never emitted', async (t) => {
  const r = run(['\n\nUser:'], ['Hello', ' world', '\n', '\nUs', 'er:', ' more']);
  t.same(r, { out: 'Hello world', stopped: true, emits: ['Hello', ' world', '', '', ''] });
});

t.test('a partial match that diverges is released', async (t) => {
  const r = run(['STOP'], ['a ST', 'OMP b', ' c']);
  t.equal(r.out, 'a STOMP b c');
  t.equal(r.stopped, false);
  t.same(r.emits, ['a ', 'STOMP b', ' c']);
});

t.test('held text is flushed at the end', async (t) => {
  const r = run(['###'], ['x #', '#']);
  t.same([r.out, r.stopped], ['x ##', false]);
});

t.test('earliest of several stop strings wins; text after it is dropped', async (t) => {
  const r = run(['bar', 'foo'], ['xx foo bar yy']);
  t.same([r.out, r.stopped], ['xx ', true]);
  const m = new StopMatcher(['end']);
  t.same(m.push('the end.'), { emit: 'the ', stopped: true, match: 'end' });
  t.same(m.push('more'), { emit: '', stopped: true });
});

t.test('no stops: passthrough; empty strings ignored', async (t) => {
  t.same(run([], ['a', 'b']).out, 'ab');
  t.same(run([''], ['a', 'b']).out, 'ab');
});

t.test('surrogate pairs are not split', async (t) => {
  const m = new StopMatcher(['\u{1F642}x']);
  const r = m.push('a\u{1F642}');
  t.equal(r.emit, 'a');
  t.equal(m.push('y').emit, '\u{1F642}y');
});
