// POST /gliner-2/* over the real tiny GLiNER2 encoder: same result as POST /inference with the
// equivalent schema, native error shapes, router default model.
import t, { type Test } from 'tap';
import { startServer, makeUser, call } from '../service/helpers.ts';
import { TinyRuntime } from './tiny-runtime.ts';

const rt = await TinyRuntime.load();
const ts = await startServer({ runtime: rt });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });
const ENC = 'gliner2-tiny-span';
const text = 'Tim Cook announced the new iPhone at the Apple campus in Cupertino on Monday.';

async function both(t: Test, path: string, body: Record<string, unknown>, schema: unknown) {
  const a = await call(ts.url, 'POST', path, { key: u.key, body: { model_id: ENC, text, threshold: 0.3, ...body } });
  const b = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: ENC, text, threshold: 0.3, schema } });
  t.equal(a.status, 200, `${path}: ${a.text.slice(0, 200)}`);
  t.equal(b.status, 200);
  t.equal(a.body.type, 'encoder');
  t.same(a.body.result, b.body.result, `${path} gives the /inference result`);
  t.type(a.body.inference_id, 'string');
  return a.body;
}

t.test('entities, classification, structures, relations', async (t) => {
  const e = await both(t, '/gliner-2/extract-entities', { entities: ['person', 'company', 'location'] }, { entities: ['person', 'company', 'location'] });
  t.type(e.result.entities, 'object');
  await both(t, '/gliner-2/extract-entities', { labels: { person: 'a human' } }, { entities: { person: 'a human' } });
  await both(t, '/gliner-2/classify-text', { task: 'topic', labels: ['tech', 'sports'] }, { classifications: [{ task: 'topic', labels: ['tech', 'sports'] }] });
  await both(t, '/gliner-2/extract-json', { structures: { product: { name: 'str', maker: 'str' } } }, { structures: { product: { name: 'str', maker: 'str' } } });
  await both(t, '/gliner-2/extract-relations', { relations: ['works_for'] }, { relations: ['works_for'] });
  await both(t, '/gliner-2/extract', { schema: ['person'] }, ['person']);
});

t.test('model_id defaults to the router; validation errors are native 422', async (t) => {
  const r = await call(ts.url, 'POST', '/gliner-2/extract-entities', { key: u.key, body: { text, entities: ['person'] } });
  t.equal(r.status, 200);
  t.equal(r.body.routed_model, ENC);
  const bad = await call(ts.url, 'POST', '/gliner-2/extract-entities', { key: u.key, body: { text } });
  t.equal(bad.status, 422);
  t.type(bad.body.detail, 'string');
  const bad2 = await call(ts.url, 'POST', '/gliner-2/classify-text', { key: u.key, body: { text, labels: 'tech' } });
  t.equal(bad2.status, 422);
  t.ok(Array.isArray(bad2.body.errors));
  const noKey = await call(ts.url, 'POST', '/gliner-2/extract', { body: { text, schema: ['x'] } });
  t.equal(noKey.status, 401);
});
