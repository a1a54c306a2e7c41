// Keys, sessions and CSRF through HTTP: creation only from a dashboard session, hash-only storage,
// masking, revocation on the very next request, bearer alternative, key-in-query rejection.
import t from 'tap';
import { sha256 } from '../../src/service/ids.ts';
import { call, makeUser, startServer } from './helpers.ts';

const ts = await startServer();
t.teardown(() => ts.close());

t.test('login sets an HttpOnly SameSite=Strict session cookie and returns a CSRF token', async (t) => {
  const { user } = await ts.services.auth.createUser({ email: 'login@example.com', password: 'pass-word-123' });
  const bad = await call(ts.url, 'POST', '/auth/login', { body: { email: 'login@example.com', password: 'wrong-password' } });
  t.equal(bad.status, 401);
  t.same(Object.keys(bad.body), ['detail']);
  const r = await call(ts.url, 'POST', '/auth/login', { body: { email: 'login@example.com', password: 'pass-word-123' } });
  t.equal(r.status, 200);
  const cookie = r.headers.get('set-cookie') ?? '';
  t.match(cookie, /^loom_session=[A-Za-z0-9_-]{40,};/);
  t.match(cookie, /HttpOnly/);
  t.match(cookie, /SameSite=Strict/);
  t.equal(r.body.user.id, user.id);
  t.type(r.body.csrf_token, 'string');
});

t.test('create-api-key: session + CSRF only; the secret is shown once and stored only as a hash', async (t) => {
  const u = await makeUser(ts);
  const noCsrf = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'x' }, headers: { Cookie: u.cookie } });
  t.equal(noCsrf.status, 403);
  t.match(noCsrf.body.detail, /CSRF/);
  const withKey = await call(ts.url, 'POST', '/create-api-key', { key: u.key, body: { name: 'x' } });
  t.equal(withKey.status, 403, 'an API-key-authenticated call gets 403');
  t.same(Object.keys(withKey.body), ['detail']);
  const none = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'x' } });
  t.equal(none.status, 401);
  const missingName = await call(ts.url, 'POST', '/create-api-key', { body: {}, headers: { Cookie: u.cookie, 'X-CSRF-Token': u.csrf } });
  t.equal(missingName.status, 422);
  t.equal(missingName.body.errors[0].path, '/name');

  const r = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'second' }, headers: { Cookie: u.cookie, 'X-CSRF-Token': u.csrf } });
  t.equal(r.status, 200);
  t.same(Object.keys(r.body).sort(), ['api_key_last_digits', 'billing_customer_created', 'created_at', 'expires_at', 'id', 'name', 'secret_key', 'team_id']);
  t.match(r.body.secret_key, /^loom_sk_[A-Za-z0-9_-]{40,}$/);
  t.equal(r.body.api_key_last_digits, r.body.secret_key.slice(-4));
  t.equal(r.body.billing_customer_created, false, 'the customer was created with the first key');
  t.equal(r.body.expires_at, null);
  t.equal(r.body.team_id, u.team_id);
  const rec = (await ts.services.store.keys.get(r.body.id))!;
  t.equal(rec.hash, sha256(r.body.secret_key));
  t.notOk(JSON.stringify(rec).includes(r.body.secret_key), 'the secret is not stored');
});

t.test('list-api-keys masks keys and reports usage; bearer works; revocation applies on the next request', async (t) => {
  const u = await makeUser(ts);
  const first = await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  t.equal(first.status, 200);
  t.equal(first.body.count, 1);
  const k = first.body.keys[0];
  t.same(Object.keys(k).sort(), ['api_key_last_digits', 'created_at', 'expires_at', 'id', 'last_used_at', 'name', 'request_count', 'team_id', 'usage_cost', 'usage_tokens']);
  t.notOk(JSON.stringify(first.body).includes(u.key), 'no secret in the list');
  const bearer = await call(ts.url, 'GET', '/list-api-keys', { headers: { Authorization: `Bearer ${u.key}` } });
  t.equal(bearer.status, 200);
  t.equal(bearer.body.keys[0].request_count, 2, 'both requests counted');
  t.type(bearer.body.keys[0].last_used_at, 'string');

  const del = await call(ts.url, 'DELETE', '/delete-api-key', { key: u.key, body: { key_id: u.key_id } });
  t.equal(del.status, 200);
  t.same(Object.keys(del.body).sort(), ['message', 'success']);
  t.equal(del.body.success, true);
  const after = await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  t.equal(after.status, 401);
  t.match(after.body.detail, /revoked/);
  const again = await call(ts.url, 'DELETE', '/delete-api-key', { headers: { Cookie: u.cookie, 'X-CSRF-Token': u.csrf }, body: { key_id: u.key_id } });
  t.equal(again.status, 404, 'revoking twice: not found');
});

t.test('401 for missing, malformed, unknown and expired keys and blocked accounts; 400 for keys in the query', async (t) => {
  const u = await makeUser(ts);
  for (const key of [undefined, 'nope', 'loom_sk_' + 'a'.repeat(43)]) {
    const r = await call(ts.url, 'GET', '/list-api-keys', { key });
    t.equal(r.status, 401);
    t.same(Object.keys(r.body), ['detail']);
  }
  const q = await call(ts.url, 'GET', `/list-api-keys?api_key=${u.key}`, { key: u.key });
  t.equal(q.status, 400);
  t.match(q.body.detail, /query/);
  const q2 = await call(ts.url, 'GET', `/base-models?x=${u.key}`);
  t.equal(q2.status, 400, 'a key value under any name is rejected');

  const exp = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'short', expires_at: new Date(Date.now() + 1500).toISOString() }, headers: { Cookie: u.cookie, 'X-CSRF-Token': u.csrf } });
  t.equal(exp.status, 200);
  t.equal((await call(ts.url, 'GET', '/list-api-keys', { key: exp.body.secret_key })).status, 200);
  await new Promise((r) => setTimeout(r, 1600));
  const expired = await call(ts.url, 'GET', '/list-api-keys', { key: exp.body.secret_key });
  t.equal(expired.status, 401);
  t.match(expired.body.detail, /expired/);

  await ts.services.auth.setTeamBlocked(u.team_id, true);
  const blocked = await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  t.equal(blocked.status, 401);
  t.match(blocked.body.detail, /blocked/);
});

t.test('keys belong to a team: members see the team keys, other teams do not', async (t) => {
  const a = await makeUser(ts);
  const b = await makeUser(ts, { team_id: a.team_id });
  const c = await makeUser(ts);
  const list = await call(ts.url, 'GET', '/list-api-keys', { key: b.key });
  t.equal(list.body.count, 2);
  const cross = await call(ts.url, 'DELETE', '/delete-api-key', { key: c.key, body: { key_id: a.key_id } });
  t.equal(cross.status, 404);
  t.equal((await call(ts.url, 'GET', '/list-api-keys', { key: a.key })).status, 200);
});

t.test('GET /auth/session needs only the session cookie (it returns the CSRF token); state changes still need CSRF', async (t) => {
  const u = await makeUser(ts);
  const s = await call(ts.url, 'GET', '/auth/session', { headers: { Cookie: u.cookie } });
  t.equal(s.status, 200, s.text);
  t.equal(s.body.csrf_token, u.csrf);
  t.equal(s.body.user_id, u.user_id);
  const none = await call(ts.url, 'GET', '/auth/session');
  t.equal(none.status, 401);
  const logout = await call(ts.url, 'POST', '/auth/logout', { headers: { Cookie: u.cookie } });
  t.equal(logout.status, 403, 'POST /auth/logout without the token is still refused');
  t.match(logout.body.detail, /CSRF/);
  const key = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'y' }, headers: { Cookie: u.cookie, 'X-CSRF-Token': s.body.csrf_token } });
  t.equal(key.status, 200, 'the token from GET /auth/session works');
});
