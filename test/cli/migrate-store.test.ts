// `loom admin migrate-store --to postgres://...`: an LMDB store with a team, a key, credits and a
// billed call, copied into an empty PostgreSQL database, serves the same key, balance and history
// from PostgreSQL; a second run is refused (the target is not empty) and changes nothing; a bad
// --to is a clear error. Needs PostgreSQL's server binaries (skipped without).
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { postgresMissing, startPostgres } from '../helpers/postgres.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { runAdmin } from './run-admin.ts';

const admin = (args: string[], dataDir: string) => runAdmin(args, { dataDir });

const missing = postgresMissing();
t.test('migrate-store copies an LMDB store into an empty PostgreSQL one', { skip: missing ?? false }, async (t) => {
  const pgs = await startPostgres();
  t.teardown(() => pgs.close());
  const url = await pgs.createDb();
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-migrate-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

  const body = { model_id: 'test/encoder', text: 'Alice met Bob', schema: ['person'] };
  const lm = await startServer({ config: { dataDir } });
  const u = await makeUser(lm, { credits: 5 });
  t.equal((await call(lm.url, 'POST', '/inference', { key: u.key, body })).status, 200, 'a billed call on LMDB');
  const before = (await call(lm.url, 'GET', '/account', { key: u.key })).body;
  await lm.close();

  const bad = await admin(['migrate-store', '--to', 'mysql://x'], dataDir);
  t.equal(bad.code, 1, 'a --to that is not a PostgreSQL URL is refused');
  t.match(bad.stderr, /--to postgres:\/\//);

  const r = await admin(['migrate-store', '--to', url], dataDir);
  t.equal(r.code, 0, `copied: ${r.stderr}`);
  const copied = JSON.parse(r.stdout).copied;
  t.equal(copied.usage, 1, 'the usage record');
  t.equal(copied.inferences, 1, 'the inference record');
  t.ok(copied.keys >= 1 && copied.idx > 0, 'keys and indexes');

  const again = await admin(['migrate-store', '--to', url], dataDir);
  t.equal(again.code, 1, 'a second run is refused');
  t.match(again.stderr, /not empty/);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  t.teardown(() => c.end());
  t.equal(Number((await c.query('SELECT count(*) FROM usage')).rows[0].count), 1, 'and wrote nothing');

  const ps = await startServer({ config: { databaseUrl: url, databasePoolSize: 2 } });
  t.teardown(() => ps.close());
  const acc = await call(ps.url, 'GET', '/account', { key: u.key });
  t.equal(acc.status, 200, 'the same key works on PostgreSQL');
  t.same(acc.body.credits, before.credits, 'the same balance');
  const hist = await call(ps.url, 'GET', '/inferences', { key: u.key });
  t.equal(hist.body.total, 1, 'the same history');
  t.equal((await call(ps.url, 'POST', '/inference', { key: u.key, body })).status, 200, 'and billing goes on there');
});
