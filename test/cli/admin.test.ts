// `loom admin` and the store it uses: run as a newcomer does (bin/loom.mjs from another folder), it
// names the store path, refuses a missing store unless --create-store, and a key it makes in the
// server's store (LOOM_DATA_DIR) is accepted by that server.
import t from 'tap';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, startServer } from '../service/helpers.ts';
import { runAdmin as admin } from './run-admin.ts';

const user = (email: string) => ['create-user', '--email', email, '--password', 'a long password here', '--key', 'k'];

t.test('no LOOM_DATA_DIR and no store: refused, path named, nothing created', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'loom-admin-cwd-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const r = await admin(user('new@example.com'), { cwd });
  t.equal(r.code, 1, 'exit 1');
  t.match(r.stderr, join(cwd, 'data', 'store'), 'names the store path it would use');
  t.match(r.stderr, /LOOM_DATA_DIR/, 'says how to point it at the server');
  t.match(r.stderr, /--create-store/, 'says how to create one');
  t.equal(r.stdout, '', 'no user, no key');
  t.notOk(existsSync(join(cwd, 'data')), './data was not created');
});

t.test('--create-store creates the store, says where, and makes the user', async (t) => {
  const cwd = mkdtempSync(join(tmpdir(), 'loom-admin-cwd-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const r = await admin([...user('first@example.com'), '--create-store'], { cwd });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, `store ${join(cwd, 'data', 'store')}`);
  t.match(JSON.parse(r.stdout), { email: 'first@example.com', api_key: /^loom_sk_/ });
  const again = await admin(['show', '--email', 'first@example.com'], { cwd });
  t.equal(again.code, 0, 'the store exists now: no flag needed');
});

t.test("with the server's LOOM_DATA_DIR the key it makes is accepted by the server", async (t) => {
  const ts = await startServer();
  t.teardown(() => ts.close());
  const cwd = mkdtempSync(join(tmpdir(), 'loom-admin-cwd-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const r = await admin(user('served@example.com'), { cwd, dataDir: ts.dataDir });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, `store ${join(ts.dataDir, 'store')} (LOOM_DATA_DIR)`);
  const key = JSON.parse(r.stdout).api_key;
  const ok = await call(ts.url, 'GET', '/base-models', { key });
  t.equal(ok.status, 200, 'the server knows the key');
  // the newcomer's mistake, now visible: a store created elsewhere holds keys this server does not know
  const other = await admin([...user('elsewhere@example.com'), '--create-store'], { cwd });
  t.equal(other.code, 0);
  t.match(other.stderr, join(cwd, 'data', 'store'), 'the other store is named');
  t.equal((await call(ts.url, 'GET', '/base-models', { key: JSON.parse(other.stdout).api_key })).status, 401);
});

t.test('`loom admin block` in another process applies to the running server on the very next request', async (t) => {
  // the server caches authenticated keys; a write from another process must still reach them at once
  const ts = await startServer();
  t.teardown(() => ts.close());
  const cwd = mkdtempSync(join(tmpdir(), 'loom-admin-cwd-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const made = await admin(user('blocked@example.com'), { cwd, dataDir: ts.dataDir });
  t.equal(made.code, 0, made.stderr);
  const key = JSON.parse(made.stdout).api_key;
  for (let i = 0; i < 3; i++) {
    t.equal((await call(ts.url, 'GET', '/v1/models', { key })).status, 200, 'served (and cached)');
  }
  t.equal((await admin(['block', '--email', 'blocked@example.com'], { cwd, dataDir: ts.dataDir })).code, 0);
  const refused = await call(ts.url, 'GET', '/v1/models', { key });
  t.equal(refused.status, 401, 'the first request after the block is refused');
  t.match(JSON.stringify(refused.body), /blocked/);
  t.equal((await admin(['unblock', '--email', 'blocked@example.com'], { cwd, dataDir: ts.dataDir })).code, 0);
  t.equal((await call(ts.url, 'GET', '/v1/models', { key })).status, 200, 'unblocked: served again');
});
