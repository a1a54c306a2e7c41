// The LMDB store: schema version, migration of an older store (indexes rebuilt), transactions,
// and reopening after an unclean stop (a child process holding the store is SIGKILLed).
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, SCHEMA_VERSION } from '../../src/store/index.ts';
import { ikey } from '../../src/store/db.ts';

const dir = () => mkdtempSync(join(tmpdir(), 'loom-store-'));
const here = import.meta.dirname;

t.test('a fresh store records the schema version; a newer one is refused', async (t) => {
  const d = dir();
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  const s = await openStore(d);
  t.equal(await s.meta.get('schema_version'), SCHEMA_VERSION);
  await s.tx((x) => x.meta.put('schema_version', SCHEMA_VERSION + 1));
  await s.close();
  await t.rejects(openStore(d), /newer than this Loom/);
});

t.test('opening a v1 store migrates it: every secondary index is rebuilt', async (t) => {
  const d = dir();
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  let s = await openStore(d);
  const now = new Date().toISOString();
  await s.tx(async (x) => {
    x.users.put({ id: 'u1', email: 'old@example.com', password_hash: 'x', team_id: 't1', created_at: now });
    x.projects.put({ id: 'p1', team_id: 't1', name: 'legacy', active_deployment_id: null, created_at: now });
    x.inferences.put({ id: 'i1', team_id: 't1', key_id: null, project_id: 'p1', model_id: 'm', routed_model: 'm', training_job_id: null, endpoint: '/inference', type: 'encoder', task: 'ner', stored_content: true, input: { text: 'x' }, schema: ['a'], params: {}, output: {}, usage: { prompt_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0, total_tokens: 1 }, cost: 0, latency_ms: 1, llmaj_score: null, status: 'success', error: null, created_at: now });
  });
  // make it look like a v1 store: no index entries, version 1
  await s.db.tx(async (h) => {
    for (const { key } of await h.range('idx')) h.remove('idx', key);
    h.put('meta', 'schema_version', 1);
  });
  t.equal(await s.users.byEmail('old@example.com'), undefined, 'indexes gone before the migration');
  await s.close();
  s = await openStore(d);
  t.teardown(() => s.close());
  t.equal(await s.meta.get('schema_version'), SCHEMA_VERSION);
  t.equal((await s.users.byEmail('old@example.com'))?.id, 'u1');
  t.equal((await s.projects.byName('t1', 'legacy'))?.id, 'p1');
  t.same((await s.inferences.query({ team_id: 't1', project_id: 'p1', limit: 10, offset: 0 })).items.map((r) => r.id), ['i1']);
  t.ok((await s.db.read.get('idx', ikey('user_email', 'old@example.com'))) === 'u1');
});

t.test('a transaction commits all of its writes or none', async (t) => {
  const d = dir();
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  const s = await openStore(d);
  t.teardown(() => s.close());
  await t.rejects(s.tx((x) => {
    x.teams.put({ id: 'a', name: 'a', region: null, blocked: false, created_at: new Date().toISOString() });
    throw new Error('boom');
  }), /boom/);
  t.equal(await s.teams.get('a'), undefined);
});

t.test('reopening after the process holding the store is killed keeps every acknowledged commit', async (t) => {
  const d = dir();
  t.teardown(() => rmSync(d, { recursive: true, force: true }));
  // node itself (not the tsx wrapper) so the SIGKILL hits the process holding the store
  const child = spawn(process.execPath, ['--import', 'tsx', join(here, 'fixtures/store-writer.ts'), d], { stdio: ['ignore', 'pipe', 'inherit'] });
  const acked: string[] = [];
  await new Promise<void>((resolve) => {
    let buf = '';
    child.stdout.on('data', (c) => {
      buf += c;
      const lines = buf.split('\n');
      buf = lines.pop()!;
      acked.push(...lines);
      if (acked.length >= 40 && !child.killed) { child.kill('SIGKILL'); }
    });
    child.on('exit', () => resolve());
  });
  t.ok(acked.length >= 40, `${acked.length} commits acknowledged before the kill`);
  const s = await openStore(d);
  t.teardown(() => s.close());
  for (const id of acked) {
    const team = await s.teams.get(id);
    const acct = await s.accounts.get(id);
    if (!team || !acct) { t.fail(`lost acknowledged commit ${id}`); return; }
  }
  t.pass('every acknowledged commit survived');
  // both records of each transaction are present together (never one without the other)
  let teams = 0;
  for (const team of await s.teams.list()) { teams++; t.ok(await s.accounts.get(team.id), `account of ${team.id}`); }
  t.ok(teams >= acked.length);
  // the store is writable again
  await s.tx((x) => x.teams.put({ id: 'after', name: 'after', region: null, blocked: false, created_at: new Date().toISOString() }));
  t.equal((await s.teams.get('after'))?.name, 'after');
});
