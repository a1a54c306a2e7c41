// The repositories' behaviour on both store implementations (LMDB and PostgreSQL, see
// test/helpers/stores.ts): transactions (all or nothing, own writes visible, concurrent
// read-modify-writes exact), index scans (order, time ranges, paging), unique lookups, keys past
// the key-size bound, and records holding any text.
import t from 'tap';
import { openStore, type Store } from '../../src/store/index.ts';
import type { InferenceRecord } from '../../src/store/types.ts';
import { eachStore } from '../helpers/stores.ts';

const iso = (ms: number) => new Date(ms).toISOString();
const team = (id: string) => ({ id, name: id, region: null, blocked: false, created_at: iso(Date.now()) });
const inference = (id: string, at: number, o: Partial<InferenceRecord> = {}): InferenceRecord => ({
  id, team_id: 't1', key_id: null, project_id: null, model_id: 'm', routed_model: 'm', training_job_id: null,
  endpoint: '/inference', type: 'encoder', task: 'ner', stored_content: true, input: { text: 'x' }, schema: ['a'], params: {},
  output: {}, usage: { prompt_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0, total_tokens: 1 },
  cost: 0, latency_ms: 1, llmaj_score: null, status: 'success', error: null, created_at: iso(at), ...o,
});

async function open(t: Parameters<Parameters<typeof eachStore>[2]>[0], target: { dataDir: string; databaseUrl: string | null }): Promise<Store> {
  const s = await openStore(target.dataDir, { databaseUrl: target.databaseUrl });
  t.teardown(() => s.close());
  return s;
}

eachStore(t, 'a transaction commits all of its writes or none, and reads its own writes', async (t, fresh) => {
  const s = await open(t, await fresh());
  await t.rejects(s.tx((x) => {
    x.teams.put(team('a'));
    throw new Error('boom');
  }), /boom/);
  t.equal(await s.teams.get('a'), undefined, 'rolled back');
  const seen = await s.tx(async (x) => {
    x.users.put({ id: 'u1', email: 'Me@Example.com', password_hash: 'h', team_id: 't1', created_at: iso(Date.now()) });
    return { direct: await s.users.get('u1'), own: (await x.users.byEmail('me@example.com'))?.id };
  });
  t.equal(seen.own, 'u1', 'its own write, through an index, inside the transaction');
  t.equal(seen.direct, undefined, 'not visible outside before the commit');
  t.equal((await s.users.byEmail('ME@example.com'))?.id, 'u1', 'committed');
  t.throws(() => s.teams.put(team('b')), /outside a transaction/, 'a write outside a transaction is refused');
});

eachStore(t, 'concurrent read-modify-write transactions lose no update', async (t, fresh) => {
  const s = await open(t, await fresh());
  await s.tx((x) => x.keys.put({
    id: 'k', name: 'k', hash: 'h', last_digits: '0000', team_id: 't1', user_id: 'u', created_at: iso(Date.now()),
    expires_at: null, revoked_at: null, last_used_at: null, request_count: 0, usage_tokens: 0, usage_cost_micro: 0,
  }));
  await Promise.all(Array.from({ length: 100 }, (_, i) => s.tx((x) => x.keys.bump('k', { requests: 1, cost_micro: i }))));
  const k = (await s.keys.get('k'))!;
  t.equal(k.request_count, 100);
  t.equal(k.usage_cost_micro, 4950);
});

eachStore(t, 'index scans: newest first, time ranges, filters and paging', async (t, fresh) => {
  const s = await open(t, await fresh());
  const t0 = Date.parse('2026-01-01T00:00:00Z');
  await s.tx((x) => {
    for (let i = 0; i < 10; i++) x.inferences.put(inference(`i${i}`, t0 + i * 1000, { project_id: i % 2 ? 'p' : null, latency_ms: i }));
    x.inferences.put(inference('other', t0, { team_id: 't2' }));
  });
  const q = (o: object) => s.inferences.query({ team_id: 't1', limit: 100, offset: 0, ...o });
  t.same((await q({})).items.map((r) => r.id), ['i9', 'i8', 'i7', 'i6', 'i5', 'i4', 'i3', 'i2', 'i1', 'i0']);
  t.same((await q({ since: t0 + 2000, until: t0 + 5000 })).items.map((r) => r.id), ['i4', 'i3', 'i2'], 'since inclusive, until exclusive');
  t.same((await q({ project_id: 'p' })).items.map((r) => r.id), ['i9', 'i7', 'i5', 'i3', 'i1']);
  const page = await q({ limit: 3, offset: 2, latency_min: 1 });
  t.same(page.items.map((r) => r.id), ['i7', 'i6', 'i5']);
  t.equal(page.total, 9);
  t.same((await s.inferences.query({ team_id: 't2', limit: 10, offset: 0 })).items.map((r) => r.id), ['other']);
});

eachStore(t, 'logs in sequence order, unique names, removal with the index entries', async (t, fresh) => {
  const s = await open(t, await fresh());
  await s.tx((x) => x.trainingArtifacts.appendLog('one', 'info', 'first'));
  await s.tx((x) => x.trainingArtifacts.appendLog('one', 'info', 'second'));
  t.same((await s.trainingArtifacts.listLogs('one')).map((l) => `${l.seq} ${l.message}`), ['0 first', '1 second'], 'appends in separate transactions');
  await s.tx(async (x) => {
    for (let i = 0; i < 12; i++) await x.trainingArtifacts.appendLog('job', 'info', `line ${i}`);
  });
  await s.tx((x) => x.trainingArtifacts.appendLog('job', 'warn', 'line 12'));
  const logs = await s.trainingArtifacts.listLogs('job');
  t.same(logs.map((l) => l.seq), Array.from({ length: 13 }, (_, i) => i), 'seq 0..12 in order, also past 9 (zero-padded keys)');
  t.same((await s.trainingArtifacts.listLogs('job', { after: 10 })).map((l) => l.message), ['line 11', 'line 12']);
  const now = iso(Date.now());
  await s.tx((x) => x.projects.put({ id: 'p1', team_id: 't1', name: 'Ünïcode ✓', active_deployment_id: null, created_at: now }));
  t.equal((await s.projects.byName('t1', 'Ünïcode ✓'))?.id, 'p1');
  await s.tx((x) => x.projects.remove('p1'));
  t.equal(await s.projects.byName('t1', 'Ünïcode ✓'), undefined, 'its name index entry went with it');
  t.same(await s.projects.listByTeam('t1'), []);
});

eachStore(t, 'a key past the key-size bound is "not found"; records keep any text', async (t, fresh) => {
  const s = await open(t, await fresh());
  const long = 'x'.repeat(5000);
  t.equal(await s.trainingJobs.get(long), undefined);
  t.same(await s.datasets.listVersions(long), []);
  t.equal(await s.datasets.byName('t1', long), undefined);
  const text = 'nul \u0000, quote \' " \\ and emoji 🧵';
  await s.tx((x) => x.teams.put({ ...team('weird'), name: text }));
  t.equal((await s.teams.get('weird'))?.name, text, 'read back unchanged');
});

eachStore(t, 'a fresh store records the schema version; reopening keeps the data', async (t, fresh, kind) => {
  const target = await fresh();
  let s = await openStore(target.dataDir, { databaseUrl: target.databaseUrl });
  t.equal(await s.meta.get('schema_version'), 2);
  t.equal(s.db.kind, kind);
  await s.tx((x) => x.teams.put(team('kept')));
  await s.close();
  s = await open(t, target);
  t.equal((await s.teams.get('kept'))?.name, 'kept');
});
