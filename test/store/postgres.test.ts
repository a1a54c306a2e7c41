// The PostgreSQL store (LOOM_DATABASE_URL): migrations run once when processes start together;
// credits stay exact when two processes debit one team at once; a key revoked through one API
// process is refused by another on its next request; a database outage answers 503 and the
// service recovers when the database is back. Needs PostgreSQL's server binaries (skipped without).
import t from 'tap';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import { openStore } from '../../src/store/index.ts';
import { migrationFiles } from '../../src/store/postgres/index.ts';
import { postgresMissing, startPostgres, type TestPostgres } from '../helpers/postgres.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';

const missing = postgresMissing();
if (missing) {
  t.test(`PostgreSQL store tests`, { skip: missing }, async () => {});
} else {
  const pgs: TestPostgres = await startPostgres();
  t.teardown(() => pgs.close());
  const now = () => new Date().toISOString();

  t.test('two processes opening a new database together migrate it once', async (t) => {
    const url = await pgs.createDb();
    const stores = await Promise.all([0, 1, 2].map(() => openStore('/nonexistent', { databaseUrl: url, poolSize: 2 })));
    t.teardown(() => Promise.all(stores.map((s) => s.close())));
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    t.teardown(() => c.end());
    const rows = (await c.query('SELECT version, name FROM schema_migrations ORDER BY version')).rows;
    t.same(rows.map((r) => r.name), migrationFiles().map((m) => m.name), 'each migration recorded once');
    await stores[0].tx((x) => x.teams.put({ id: 't', name: 'n', region: null, blocked: false, created_at: now() }));
    t.equal((await stores[2].teams.get('t'))?.name, 'n', 'one database behind every opener');
  });

  t.test('credits are exact after 300 concurrent billed debits from two processes', async (t) => {
    const url = await pgs.createDb();
    const s = await openStore('/nonexistent', { databaseUrl: url });
    t.teardown(() => s.close());
    const team = 'team-1';
    await s.tx((x) => {
      x.teams.put({ id: team, name: 'n', region: null, blocked: false, created_at: now() });
      x.accounts.put({
        team_id: team, plan: 'free', free_allowance_micro: 1_000_000, included_micro: 0, paid_balance_micro: 5_000_000,
        overage_micro: 0, overage_enabled: false, card_on_file: false, period_start: now(), billing_customer_id: null,
        total_spent_micro: 0, updated_at: now(),
      });
      x.keys.put({
        id: 'key-1', name: 'k', hash: 'h', last_digits: 'abcd', team_id: team, user_id: 'u', created_at: now(),
        expires_at: null, revoked_at: null, last_used_at: null, request_count: 0, usage_tokens: 0, usage_cost_micro: 0,
      });
    });
    const child = () => new Promise<string>((resolve, reject) => {
      const p = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'fixtures/pg-biller.ts'), url, team, 'key-1', '150'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      p.stdout.on('data', (d) => { out += d; });
      p.on('error', reject);
      p.on('exit', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error(`biller exited ${code}`))));
    });
    t.same(await Promise.all([child(), child()]), ['done 150', 'done 150'], 'both processes committed all their debits');
    const cost = 7 * 1000;
    const a = (await s.accounts.get(team))!;
    t.equal(a.total_spent_micro, 300 * cost, 'total spent: every debit once');
    t.equal(a.free_allowance_micro + a.paid_balance_micro, 6_000_000 - 300 * cost, 'balance: allowance + paid − spent');
    const usage = await s.usage.listByTeam(team);
    t.equal(usage.length, 300, 'one usage record per debit');
    t.equal(usage.reduce((n, u) => n + u.cost_micro, 0), 300 * cost, 'usage records add up to what was debited');
    const k = (await s.keys.get('key-1'))!;
    t.equal(k.usage_cost_micro, 300 * cost, 'key counters exact');
    t.equal(k.usage_tokens, 300 * 7);
  });

  t.test('group commit: concurrent transactions of a process commit in call order, a throwing one alone', async (t) => {
    const url = await pgs.createDb();
    const s = await openStore('/nonexistent', { databaseUrl: url, poolSize: 4 });
    t.teardown(() => s.close());
    // 60 read-modify-write transactions on one counter at once: every 6th throws after its write
    const res = await Promise.allSettled(Array.from({ length: 60 }, (_, i) => s.tx(async (x) => {
      const n = ((await x.meta.get('counter')) as number | undefined) ?? 0;
      x.meta.put('counter', n + 1);
      x.meta.put(`seen-${i}`, n);
      if (i % 6 === 5) throw new Error(`refused ${i}`);
      return n;
    })));
    const failed = res.flatMap((r, i) => (r.status === 'rejected' ? [i] : []));
    t.same(failed, Array.from({ length: 10 }, (_, k) => 6 * k + 5), 'exactly the throwing transactions failed');
    t.match((res[5] as PromiseRejectedResult).reason, { message: 'refused 5' }, 'each with its own error');
    t.equal(await s.meta.get('counter'), 50, 'the others each incremented once: no lost update');
    const values = res.flatMap((r) => (r.status === 'fulfilled' ? [r.value as number] : []));
    t.same(values, Array.from({ length: 50 }, (_, k) => k), 'in call order, each seeing the ones before it');
    t.equal(await s.meta.get('seen-5'), undefined, 'a failed transaction wrote nothing');
  });

  t.test('a connection the server ends in the middle of a transaction fails that transaction, not the process',
    async (t) => {
      const url = await pgs.createDb();
      const s = await openStore('/nonexistent', { databaseUrl: url, poolSize: 2 });
      t.teardown(() => s.close());
      let go!: () => void;
      const paused = new Promise<void>((r) => { go = r; });
      let entered!: () => void;
      const inside = new Promise<void>((r) => { entered = r; });
      const tx = s.tx(async (x) => {
        await x.meta.get('counter');
        entered();
        await paused; // the checked-out connection sits between two queries here
        x.meta.put('counter', 1);
      });
      await inside;
      // as a database restart does to every session: FATAL 57P01 arrives on an idle checked-out connection
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      t.teardown(() => admin.end());
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`);
      await new Promise((r) => setTimeout(r, 200)); // the FATAL reaches the client (it crashed the process before)
      go();
      await t.rejects(tx, 'the transaction that held the ended connection fails');
      await s.tx((x) => { x.meta.put('counter', 2); });
      t.equal(await s.meta.get('counter'), 2, 'the next transaction runs on a new connection');
    });

  t.test('a key revoked through one API process is refused by the other on its next request', async (t) => {
    const url = await pgs.createDb();
    const config = { databaseUrl: url, databasePoolSize: 4 };
    const a = await startServer({ config });
    const b = await startServer({ config });
    t.teardown(async () => { await a.close(); await b.close(); });
    const u = await makeUser(a, { credits: 5 });
    const body = { model_id: 'test/encoder', text: 'Alice met Bob', schema: ['person'] };
    t.equal((await call(b.url, 'POST', '/inference', { key: u.key, body })).status, 200, 'the key works on B (now cached there)');
    t.equal((await call(b.url, 'POST', '/inference', { key: u.key, body })).status, 200);
    const del = await call(a.url, 'DELETE', '/delete-api-key', { key: u.key, body: { key_id: u.key_id } });
    t.equal(del.status, 200, 'revoked through A');
    const r = await call(b.url, 'POST', '/inference', { key: u.key, body });
    t.equal(r.status, 401, 'B refuses it on the next request');
    t.match(r.body.detail, /revoked/);
    const ledger = await a.services.store.usage.listByTeam(u.team_id);
    t.equal(ledger.length, 2, 'both servers billed into the same ledger');
  });

  t.test('a database outage answers 503, and the service recovers when it is back', async (t) => {
    const url = await pgs.createDb();
    const ts = await startServer({ config: { databaseUrl: url, databasePoolSize: 4 } });
    t.teardown(() => ts.close());
    const u = await makeUser(ts, { credits: 5 });
    const body = { model_id: 'test/encoder', text: 'Alice met Bob', schema: ['person'] };
    t.equal((await call(ts.url, 'POST', '/inference', { key: u.key, body })).status, 200);
    pgs.stop();
    let restarted = false;
    t.teardown(() => { if (!restarted) pgs.start(); });
    const down = await call(ts.url, 'POST', '/inference', { key: u.key, body });
    t.equal(down.status, 503, 'a billed call while the database is down: 503');
    t.match(down.body, { detail: /database is unavailable/ }, 'the spec\'s 503 body, saying why');
    t.ok(Number(down.headers.get('retry-after')) >= 1, 'with Retry-After');
    const hist = await call(ts.url, 'GET', '/inferences', { key: u.key });
    t.equal(hist.status, 503, 'a read while the database is down: 503');
    pgs.start();
    restarted = true;
    const back = await call(ts.url, 'POST', '/inference', { key: u.key, body });
    t.equal(back.status, 200, 'served again once the database is back');
    const h = await call(ts.url, 'GET', '/inferences', { key: u.key });
    t.equal(h.body.total, 2, 'the calls before and after the outage are recorded; none during it');
  });
}
