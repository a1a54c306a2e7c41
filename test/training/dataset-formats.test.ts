import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseJsonl, parseCsv, DatasetFormatError, DATASET_TYPE_KINDS, recordToJson } from '../../src/training/data/formats.ts';

const data = join(import.meta.dirname, '../../../shared/data');
const head = (p: string, n: number) => readFileSync(join(data, p), 'utf8').split('\n').slice(0, n).join('\n');

t.test('parses every shared dataset format', async (t) => {
  t.same(new Set(parseJsonl(head('conll2003/train.jsonl', 50)).map((r) => r.kind)), new Set(['ner']));
  t.same(new Set(parseJsonl(head('conll04/train.jsonl', 50)).map((r) => r.kind)), new Set(['relations']));
  t.same(new Set(parseJsonl(head('banking77/train.jsonl', 50)).map((r) => r.kind)), new Set(['classification']));
  t.same(new Set(parseJsonl(head('alpaca/train.jsonl', 50)).map((r) => r.kind)), new Set(['chat']));
  const recs = parseJsonl(head('wnut17/dev.jsonl', 200));
  for (const r of recs) t.same(parseJsonl(JSON.stringify(recordToJson(r)))[0], r);
});

t.test('gliner2, dpo and grpo records', async (t) => {
  const recs = parseJsonl([
    JSON.stringify({ input: 'Tim Cook leads Apple.', output: { entities: { person: ['Tim Cook'] } } }),
    JSON.stringify({ prompt: 'Say hi', chosen: 'Hi!', rejected: 'No.' }),
    JSON.stringify({ prompt: [{ role: 'user', content: '2+2?' }], answer: '4' }),
  ].join('\n'));
  t.same(recs.map((r) => r.kind), ['gliner2', 'dpo', 'grpo']);
});

t.test('errors name the line and the problem', async (t) => {
  const bad = (s: string, re: RegExp, expect?: never) => {
    try {
      parseJsonl(s, expect);
      t.fail('should throw');
    } catch (e) {
      t.ok(e instanceof DatasetFormatError);
      t.match((e as Error).message, re);
    }
  };
  bad('{"text":"a b","label":"x"}\n{not json}', /^line 2: invalid JSON/);
  bad('\n\n{"text":"abc","entities":[{"start":0,"end":9,"label":"x"}]}', /^line 3: entities\[0\] span \[0, 9\) is outside/);
  bad('{"text":"abc","entities":[{"start":0,"end":2,"label":"x","text":"bc"}]}', /does not match text\[0:2\] = "ab"/);
  bad('{"foo":1}', /unrecognized record/);
  bad('{"messages":[{"role":"robot","content":"x"}]}', /role must be one of/);
  try {
    parseJsonl('{"messages":[{"role":"user","content":"x"}]}', DATASET_TYPE_KINDS.ner as never);
    t.fail('should throw');
  } catch (e) {
    t.match((e as Error).message, /a chat record is not valid here \(expected ner or relations or gliner2\)/);
  }
});

t.test('CSV with quoting and JSON columns', async (t) => {
  const recs = await parseCsv('text,label\n"Hello, world",greeting\n"She said ""hi""",quote\n');
  t.same(recs.map((r) => recordToJson(r)), [{ text: 'Hello, world', label: 'greeting' }, { text: 'She said "hi"', label: 'quote' }]);
  const ner = await parseCsv('text,entities\nBob runs,"[{""start"":0,""end"":3,""label"":""person""}]"\n');
  t.equal(ner[0].kind, 'ner');
  await t.rejects(parseCsv('text,entities\nBob,notjson\n'), /line 2: column "entities" must hold JSON/);
});

t.test('code-point offsets (Python) are converted to UTF-16 offsets', async (t) => {
  const text = 'wish im 😭 ryan';
  // code points: 'ryan' at [10, 14); UTF-16: [11, 15)
  const [r] = parseJsonl(JSON.stringify({ text, entities: [{ start: 10, end: 14, label: 'person', text: 'ryan' }] }));
  t.same((r as { entities: unknown[] }).entities, [{ start: 11, end: 15, label: 'person', text: 'ryan' }]);
  const [u] = parseJsonl(JSON.stringify({ text, entities: [{ start: 11, end: 15, label: 'person', text: 'ryan' }] }));
  t.same((u as { entities: unknown[] }).entities, [{ start: 11, end: 15, label: 'person', text: 'ryan' }]);
  // the whole shared wnut17 dev split parses
  t.equal(parseJsonl(readFileSync(join(data, 'wnut17/dev.jsonl'), 'utf8')).length, 1009);
});
