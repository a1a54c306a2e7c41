// Corrections → training records (src/service/adaptive/corrections.ts): every encoder task and the
// decoder reply, each record read back by the dataset parser (src/training/data/formats.ts) as the
// trainer will; what does not fit the schema is a ValidationError naming the JSON pointer.
import t from 'tap';
import { correctionRecord } from '../../src/service/adaptive/corrections.ts';
import { ValidationError } from '../../src/service/errors.ts';
import type { InferenceRecord } from '../../src/store/index.ts';
import { toRecord } from '../../src/training/data/formats.ts';

const inf = (over: Partial<InferenceRecord>): InferenceRecord => ({
  id: 'i',
  team_id: 't',
  key_id: null,
  project_id: null,
  model_id: 'm',
  routed_model: 'm',
  training_job_id: null,
  endpoint: '/inference',
  type: 'encoder',
  task: 'ner',
  stored_content: true,
  input: { text: 'Alice joined Acme in Paris; Alice left.' },
  schema: ['person'],
  params: {},
  output: {},
  usage: { prompt_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0, total_tokens: 1 },
  cost: 0,
  latency_ms: 1,
  llmaj_score: null,
  status: 'success',
  error: null,
  created_at: new Date().toISOString(),
  ...over,
});
const pathOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    if (e instanceof ValidationError) return e.errors[0]?.path;
    throw e;
  }
  return null;
};

t.test('entities: spans, mentions located (repeats in order, case-insensitive fallback), the ner format', async (t) => {
  const r = inf({ schema: { entities: ['person', 'company', 'city'] } });
  const rec = correctionRecord(r, {
    entities: { person: ['Alice', 'alice'], company: [{ text: 'Acme', start: 13, end: 17 }], city: { text: 'Paris' } },
  });
  t.same(rec, {
    text: 'Alice joined Acme in Paris; Alice left.',
    entities: [
      { start: 0, end: 5, label: 'person', text: 'Alice' },
      { start: 13, end: 17, label: 'company', text: 'Acme' },
      { start: 21, end: 26, label: 'city', text: 'Paris' },
      { start: 28, end: 33, label: 'person', text: 'Alice' },
    ],
  });
  t.match(toRecord(rec, 1), { kind: 'ner' });
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { animal: ['Alice'] } })),
    '/corrected_output/entities/animal',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { person: ['Bob'] } })),
    '/corrected_output/entities/person/0',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { person: [{ text: 'Alice', start: 1, end: 6 }] } })),
    '/corrected_output/entities/person/0/text',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { person: [{ start: 5, end: 5 }] } })),
    '/corrected_output/entities/person/0',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { person: [{ start: 0.5, end: 5 }] } })),
    '/corrected_output/entities/person/0/start',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { entities: { person: [7] } })),
    '/corrected_output/entities/person/0',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { labels: [] })),
    '/corrected_output/labels',
  );
});

t.test('classifications, relations, structures: the GLiNER2 training format', async (t) => {
  const r = inf({
    task: 'extraction',
    schema: {
      entities: ['person'],
      classifications: [
        { task: 'tone', labels: ['good', 'bad'] },
        { task: 'topics', labels: ['work', 'travel'], multi_label: true },
      ],
      relations: ['works_for'],
      structures: { move: ['who::str', 'where::str', 'kind::[hire|quit]::str'] },
    },
  });
  const rec = correctionRecord(r, {
    entities: { person: ['Alice'] },
    classifications: { tone: { label: 'good', confidence: 0.3 }, topics: ['work', 'travel'] },
    relations: { works_for: [{ head: { text: 'Alice' }, tail: 'Acme' }] },
    structures: { move: [{ who: 'Alice', where: { text: 'Paris' }, kind: 'hire' }] },
  });
  t.same(rec, {
    input: 'Alice joined Acme in Paris; Alice left.',
    output: {
      entities: { person: ['Alice'] },
      classifications: [
        { task: 'tone', labels: ['good', 'bad'], true_label: 'good', multi_label: false },
        { task: 'topics', labels: ['work', 'travel'], true_label: ['work', 'travel'], multi_label: true },
      ],
      relations: [{ works_for: { head: 'Alice', tail: 'Acme' } }],
      json_structures: [{ move: { who: 'Alice', where: 'Paris', kind: { value: 'hire', choices: ['hire', 'quit'] } } }],
    },
  });
  t.match(toRecord(rec, 1), { kind: 'gliner2' });
  t.equal(
    pathOf(() => correctionRecord(r, { classifications: { tone: 'meh' } })),
    '/corrected_output/classifications/tone',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { classifications: { tone: ['good', 'bad'] } })),
    '/corrected_output/classifications/tone',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { classifications: { mood: 'good' } })),
    '/corrected_output/classifications/mood',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { relations: { works_for: [{ head: 'Alice', tail: 'Globex' }] } })),
    '/corrected_output/relations/works_for/0/tail',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { structures: { move: [{ when: 'now' }] } })),
    '/corrected_output/structures/move/0/when',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { structures: { move: [{ kind: 'fire' }] } })),
    '/corrected_output/structures/move/0/kind',
  );
});

t.test('decoder: the conversation plus the corrected reply, the chat format', async (t) => {
  const r = inf({
    type: 'decoder',
    task: 'generate',
    input: {
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi?' },
      ],
    },
    schema: null,
  });
  const rec = correctionRecord(r, { content: 'Hello.' });
  t.same(rec, {
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi?' },
      { role: 'assistant', content: 'Hello.' },
    ],
  });
  t.match(toRecord(rec, 1), { kind: 'chat' });
  t.equal(
    pathOf(() => correctionRecord(r, { content: '  ' })),
    '/corrected_output/content',
  );
  t.equal(
    pathOf(() => correctionRecord(r, { text: 'x' })),
    '/corrected_output/text',
  );
});

t.test('inferences that cannot become examples', async (t) => {
  t.equal(
    pathOf(() => correctionRecord(inf({ stored_content: false, input: null }), { entities: {} })),
    '/corrected_output',
  );
  t.equal(
    pathOf(() => correctionRecord(inf({ input: { text: ['a', 'b'] } }), { entities: {} })),
    '/corrected_output',
  );
});
