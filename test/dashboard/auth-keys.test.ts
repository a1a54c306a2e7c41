// The dashboard in Chromium: the first user of an empty store created from the page, sign out and in,
// a wrong password shown as the API's message, a key created (secret shown once, never stored in
// the browser), used against the API, revoked from the page and then refused (401); a session ended
// elsewhere returns the page to sign-in; failed sign-ins are rate-limited. Also the static serving:
// cache headers and the Content-Security-Policy.
import t from 'tap';
import { call, startServer } from '../service/helpers.ts';
import { clickText, fill, openBrowser, signIn, waitForText } from './browser.ts';

const ts = await startServer();
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
});
const { page } = b;
const EMAIL = 'admin@example.com';
const PASSWORD = 'a long enough password';

t.test('static serving: redirect, cache headers, CSP', async (t) => {
  const root = await fetch(`${ts.url}/`, { redirect: 'manual' });
  t.equal(root.status, 302);
  t.equal(root.headers.get('location'), '/dashboard/');
  const index = await fetch(`${ts.url}/dashboard/`);
  t.equal(index.status, 200);
  t.equal(index.headers.get('cache-control'), 'no-cache');
  const csp = index.headers.get('content-security-policy') ?? '';
  t.match(csp, /script-src 'self'(;|$)/, 'scripts from this origin only: no inline script, no eval');
  t.notMatch(csp, /unsafe-inline|unsafe-eval/);
  const html = await index.text();
  t.notMatch(html, /<script>|<script(?![^>]*\bsrc=)[^>]*>/, 'no inline script in index.html');
  const asset = /src="(\/dashboard\/assets\/[^"]+\.js)"/.exec(html)![1];
  const a = await fetch(ts.url + asset);
  t.equal(a.status, 200);
  t.equal(a.headers.get('cache-control'), 'public, max-age=31536000, immutable');
  t.match(a.headers.get('content-type'), /javascript/);
  t.equal((await fetch(`${ts.url}/dashboard/assets/nope.js`)).status, 404);
});

t.test('first user from the page, sign out, wrong password, sign in', async (t) => {
  await page.goto(`${ts.url}/`);
  await waitForText(page, 'button[type=submit]', 'Create the first user');
  await fill(page, 'input[name=email]', EMAIL);
  await fill(page, 'input[name=password]', PASSWORD);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=sign-out]');
  t.equal((await call(ts.url, 'GET', '/auth/setup')).body.needs_setup, false);
  const again = await call(ts.url, 'POST', '/auth/setup', {
    body: { email: 'x@example.com', password: 'another password' },
  });
  t.equal(again.status, 403, 'the first-user form works only on an empty store');

  await page.click('[data-testid=sign-out]');
  await waitForText(page, '.notice', 'You signed out');
  await fill(page, 'input[name=email]', EMAIL);
  await fill(page, 'input[name=password]', 'wrong password');
  await page.click('button[type=submit]');
  t.match(
    await waitForText(page, '[role=alert]', 'Invalid email or password'),
    /Invalid email or password/,
    "the API's message",
  );

  await signIn(page, ts.url, EMAIL, PASSWORD);
  await page.reload();
  t.equal(
    await waitForText(page, '[data-testid=who]', EMAIL),
    EMAIL,
    'a reload keeps the session (cookie) and gets the CSRF token again',
  );
  t.same(b.errors, [], 'no page errors or CSP violations');
});

t.test('create a key, read it once, use it, revoke it, see 401', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/keys`);
  await fill(page, 'input[name=key-name]', 'ci key');
  await clickText(page, 'button', 'Create key');
  await waitForText(page, '[data-testid=new-secret]', 'you will not see it again');
  const secret = await page.$eval('[data-testid=secret-value]', (e) => e.textContent ?? '');
  t.match(secret, /^loom_sk_/);

  const stored = await page.evaluate(
    () => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie + location.href,
  );
  t.notOk(stored.includes(secret), 'the secret is in no storage, cookie or URL');
  t.notOk(stored.includes('loom_session'), 'the session cookie is HttpOnly');

  const ok = await call(ts.url, 'GET', '/list-api-keys', { key: secret });
  t.equal(ok.status, 200, 'the new key works against the API');
  t.ok(ok.body.keys.some((k: { name: string }) => k.name === 'ci key'));

  await clickText(page, 'button', 'I have stored it');
  t.equal(await page.$('[data-testid=secret-value]'), null, 'the secret is gone from the page');
  await page.reload();
  await waitForText(page, '[data-testid=keys-table]', 'ci key');
  t.notOk((await page.content()).includes(secret), 'the list never shows the secret again');

  await page.click('[data-testid=revoke]');
  await page.click('[data-testid=revoke-yes]');
  await page.waitForFunction(
    () => !document.querySelector('[data-testid=keys-table]')?.textContent?.includes('ci key'),
  );
  const after = await call(ts.url, 'GET', '/list-api-keys', { key: secret });
  t.equal(after.status, 401, 'the revoked key gets 401 at once');
  t.match(after.body.detail, /revoked/);
});

/** signs the browser's session out from outside the page (another tab, an admin, expiry) */
async function endBrowserSession(): Promise<void> {
  const cookie = `loom_session=${(await page.cookies()).find((c) => c.name === 'loom_session')!.value}`;
  const s = await call(ts.url, 'GET', '/auth/session', { headers: { Cookie: cookie } });
  await call(ts.url, 'POST', '/auth/logout', { headers: { Cookie: cookie, 'X-CSRF-Token': s.body.csrf_token } });
}

t.test('a session ended elsewhere returns the page to sign-in with the reason', async (t) => {
  const cookie = (await page.cookies()).find((c) => c.name === 'loom_session')!;
  t.ok(cookie.httpOnly, 'HttpOnly');
  t.equal(cookie.sameSite, 'Strict');
  await endBrowserSession();
  await page.goto(`${ts.url}/dashboard/#/inferences`);
  await waitForText(page, 'button[type=submit]', 'Sign in');
  await signIn(page, ts.url, EMAIL, PASSWORD);
  await page.evaluate(() => {
    location.hash = '#/keys';
  });
  await page.waitForSelector('[data-testid=keys-table]');
  await endBrowserSession();
  await fill(page, 'input[name=key-name]', 'too late');
  await clickText(page, 'button', 'Create key');
  t.match(await waitForText(page, '.notice', 'Signed out'), /Dashboard session required/, 'the API says why');
});

t.test('failed sign-ins are rate-limited', async (t) => {
  let last = 0;
  for (let i = 0; i < 12 && last !== 429; i++) {
    last = (await call(ts.url, 'POST', '/auth/login', { body: { email: EMAIL, password: `wrong ${i}` } })).status;
  }
  t.equal(last, 429, 'repeated wrong passwords end in 429');
  await fill(page, 'input[name=email]', EMAIL);
  await fill(page, 'input[name=password]', PASSWORD);
  await page.click('button[type=submit]');
  t.match(
    await waitForText(page, '[role=alert]', 'Rate limit'),
    /retry after/,
    'even the right password waits, and the page says so',
  );
});
