// The reward functions of src/rl/rewards: a table per type, ROUGE-L against rouge-score's values.
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { computeRewards, PURE_REWARDS, REWARD_TYPES, type RewardType } from '../../src/rl/rewards/index.ts';
import { chosenLetter } from '../../src/rl/rewards/text.ts';
import { lastNumber } from '../../src/rl/rewards/numeric.ts';
import { extractJson } from '../../src/rl/rewards/json.ts';
import { rougeL, rougeTokens } from '../../src/rl/rewards/rouge.ts';

type Row = [completion: string, answer: string, reward: number];

async function table(t: Test, type: RewardType, rows: Row[]) {
  const { rewards, errors } = await computeRewards(type, rows.map(([completion, answer]) => ({ prompt: 'p', completion, answer })));
  rows.forEach(([c, a, want], i) => {
    t.equal(errors[i], null, `${type} no error for ${JSON.stringify(c)}`);
    t.ok(Math.abs(rewards[i] - want) < 1e-12, `${type}(${JSON.stringify(c)}, ${JSON.stringify(a)}) = ${rewards[i]}, want ${want}`);
  });
}

t.test('the nine types are listed and eight are pure', async (t) => {
  t.equal(REWARD_TYPES.length, 9);
  t.same(Object.keys(PURE_REWARDS).sort(), REWARD_TYPES.filter((r) => r !== 'llm_as_judge').sort());
});

t.test('exact_match: trimmed, whitespace collapsed, case-sensitive', (t) => table(t, 'exact_match', [
  ['Paris', 'Paris', 1],
  ['  Paris \n', 'Paris', 1],
  ['New   York\tCity', 'New York City', 1],
  ['paris', 'Paris', 0],
  ['Paris.', 'Paris', 0],
  ['', '', 1],
]));

t.test('contains_substring: case-insensitive containment', (t) => table(t, 'contains_substring', [
  ['Once upon a time there was a Dragon.', 'dragon', 1],
  ['no such word', 'dragon', 0],
  ['DRAGONS', ' dragon ', 1],
  ['anything', '', 0],
]));

t.test('numeric_match: the last number, tolerance 1e-6 relative', async (t) => {
  await table(t, 'numeric_match', [
    ['The answer is 42.', '42', 1],
    ['First 3, then 7, so 10', '10', 1],
    ['3 then 10 so 7', '10', 0],
    ['It costs $1,234.50 in total', '1234.5', 1],
    ['-17', '#### -17', 1],
    ['about 3/4 of them', '0.75', 1],
    ['2.5e3 metres', '2500', 1],
    ['1000000.0000001', '1000000', 1],
    ['0.0000011', '0', 0],
    ['0.0000009', '0', 1],
    ['no number here', '5', 0],
    ['x = 12', 'Reasoning... #### 12', 1],
  ]);
  t.equal(lastNumber('v2 and item3'), null, 'digits inside words are not numbers');
  const { rewards, errors } = await computeRewards('numeric_match', [{ prompt: '', completion: '4', answer: 'four' }]);
  t.same(rewards, [0]);
  t.match(errors[0], /holds no number/);
});

t.test('choice_match: the chosen letter, found robustly', async (t) => {
  await table(t, 'choice_match', [
    ['B', 'B', 1],
    ['(C)', 'C', 1],
    ['B) Paris', 'B', 1],
    ['The answer is (D).', 'D', 1],
    ['Answer: b', '(B)', 1],
    ['I think A is wrong; the correct option is C', 'C', 1],
    ['A dog is not a cat, so the answer is B', 'B', 1],
    ['A dog is not a cat', 'A', 0],
    ['Option (A) seems off but (C) fits', 'C', 1],
    ['The answer is C', 'D', 0],
    ['no letter here', 'A', 0],
  ]);
  t.equal(chosenLetter('A. Mercury'), 'A');
  const { errors } = await computeRewards('choice_match', [{ prompt: '', completion: 'A', answer: 'maybe' }]);
  t.match(errors[0], /names no letter/);
});

t.test('regex_match: a search, on the linear-time engine', async (t) => {
  await table(t, 'regex_match', [
    ['The total is 42 apples', '\\d+ apples', 1],
    ['The total is 42 apples', '^\\d+ apples$', 0],
    ['42 apples', '^\\d+ apples$', 1],
    ['HELLO world', 'hello', 0],
    ['HELLO world', '(?i)hello', 1],
    ['<think>x</think><answer>7</answer>', '^<think>[\\s\\S]*</think><answer>\\d+</answer>$', 1],
    ['aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab', '^(a+)+$', 0],
  ]);
  const { rewards, errors } = await computeRewards('regex_match', [
    { prompt: '', completion: 'abab', answer: '(ab)\\1' },
    { prompt: '', completion: 'x', answer: '([' },
  ]);
  t.same(rewards, [0, 0]);
  t.match(errors[0], /backreference|linear time/);
  t.match(errors[1], /not a valid regular expression/);
});

t.test('json_match: parsed equality, fences allowed', async (t) => {
  await table(t, 'json_match', [
    ['{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}', 1],
    ['Here you go:\n```json\n{"a": 1.0}\n```\nDone.', '{"a":1}', 1],
    ['```\n[1, 2, 3]\n```', '[1,2,3]', 1],
    ['The result is {"name": "Ada"} as asked', '{"name":"Ada"}', 1],
    ['{"a": 1, "b": [2, 1]}', '{"a":1,"b":[1,2]}', 0],
    ['{"a": 1, "extra": true}', '{"a":1}', 0],
    ['not json', '{"a":1}', 0],
    ['"yes"', '"yes"', 1],
  ]);
  const { errors } = await computeRewards('json_match', [{ prompt: '', completion: '{}', answer: '{oops' }]);
  t.match(errors[0], /answer is not valid JSON/);
  t.same(extractJson('```json\n{"a":1}\n``` and ```json\n{"b":2}\n```'), { b: 2 }, 'the last fence wins');
});

t.test('json_loose_match: matching leaves over all leaf paths', (t) => table(t, 'json_loose_match', [
  ['{"a":1,"b":2,"c":3,"d":4}', '{"a":1,"b":2,"c":3,"d":4}', 1],
  ['{"a":1,"b":2,"c":3,"d":5}', '{"a":1,"b":2,"c":3,"d":4}', 3 / 4],
  ['{"a":1,"b":2}', '{"a":1,"b":2,"c":3,"d":4}', 2 / 4],
  ['{"a":1,"b":2,"c":3,"d":4,"e":5}', '{"a":1,"b":2,"c":3,"d":4}', 4 / 5],
  ['{"p":{"name":"Ada","age":36},"tags":["x","y"]}', '{"p":{"name":"Ada","age":37},"tags":["x","y"]}', 3 / 4],
  ['{"tags":[]}', '{"tags":[]}', 1],
  ['[1,2,3]', '[1,2,4]', 2 / 3],
  ['5', '5', 1],
  ['garbage', '{"a":1}', 0],
]));

t.test('rougeL_match equals the rouge-score package', async (t) => {
  const fx = JSON.parse(readFileSync(join(import.meta.dirname, '../fixtures/rouge/rougeL.json'), 'utf8')) as {
    cases: { prediction: string; target: string; precision: number; recall: number; fmeasure: number }[];
  };
  t.ok(fx.cases.length >= 10);
  for (const c of fx.cases) {
    const r = rougeL(c.prediction, c.target);
    t.ok(Math.abs(r.fmeasure - c.fmeasure) < 1e-12 && Math.abs(r.precision - c.precision) < 1e-12
      && Math.abs(r.recall - c.recall) < 1e-12, `${JSON.stringify(c.prediction)} vs ${JSON.stringify(c.target)}: `
      + `${r.fmeasure} want ${c.fmeasure}`);
  }
  const { rewards } = await computeRewards('rougeL_match', fx.cases.map((c) => ({ prompt: '', completion: c.prediction, answer: c.target })));
  t.same(rewards, fx.cases.map((c) => c.fmeasure));
  t.same(rougeTokens("It's naïve!"), ['it', 's', 'na', 've']);
  // rouge-score's README example: score(target='The quick brown fox jumps over the lazy dog',
  // prediction='The quick brown dog jumps on the log.') → precision 0.625, recall 0.5555…, F 0.5882…
  const ex = rougeL('The quick brown dog jumps on the log.', 'The quick brown fox jumps over the lazy dog');
  t.same([ex.precision, ex.recall, ex.fmeasure.toFixed(4)], [0.625, 5 / 9, '0.5882']);
});

t.test('llm_as_judge: the service judge scores; a failed item is 0 with its error', async (t) => {
  await t.rejects(computeRewards('llm_as_judge', [{ prompt: 'p', completion: 'c', answer: 'a' }]), /need the service judge/);
  const seen: unknown[] = [];
  const opts = { model: 'm', rubric: 'r', scoreScale: 10, timeoutS: 5, maxConcurrent: 2, maxRetries: 1, retryBackoffS: 0, teamId: 't' };
  const out = await computeRewards('llm_as_judge', [
    { prompt: 'p', completion: 'good', answer: 'a' },
    { prompt: 'p', completion: 'bad', answer: 'a' },
    { prompt: 'p', completion: 'over', answer: 'a' },
  ], {
    judgeOptions: opts,
    judge: async (items, o) => {
      seen.push(items.length, o);
      return { scores: [0.8, NaN, 1.5], errors: [null, 'judge timed out after 5 s', null] };
    },
  });
  t.same(seen, [3, opts]);
  t.same(out.rewards, [0.8, 0, 1]);
  t.same(out.errors, [null, 'judge timed out after 5 s', null]);
});
