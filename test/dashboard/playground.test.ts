// The playground in Chromium: a playground key created from the session (held in page memory only),
// an encoder call from the schema builder showing highlighted spans, and a streamed decoder chat whose
// reply, usage and cost appear; an API error is shown as the API's message.
import t from 'tap';
import { makeUser, startServer } from '../service/helpers.ts';
import type { FakeRuntime } from '../service/fake-runtime.ts';
import { clickText, fill, openBrowser, signIn, waitForText } from './browser.ts';

const ts = await startServer();
const u = await makeUser(ts, { credits: 100 });
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
});
const { page } = b;
const ENCODER = 'fastino/gliner2-base-v1';
const DECODER = 'HuggingFaceTB/SmolLM2-135M-Instruct';
(ts.runtime as FakeRuntime).setReady(ENCODER);
(ts.runtime as FakeRuntime).setReady(DECODER);

t.before(async () => {
  await signIn(page, ts.url, u.email, u.password);
  await page.goto(`${ts.url}/dashboard/#/playground`);
  await clickText(page, 'button', 'Create a playground key');
  await page.waitForFunction(() =>
    (document.querySelector('input[type=password]') as HTMLInputElement).value.startsWith('loom_sk_'),
  );
});

t.test('encoder: schema builder → highlighted spans, usage and cost', async (t) => {
  await fill(page, 'input[list=pg-models]', ENCODER);
  await page.type('textarea', 'Alice moved to Paris');
  await fill(page, 'input[placeholder="person, organization, city"]', 'person, city');
  await clickText(page, 'button', 'Run');
  await page.waitForSelector('[data-testid=span-text] mark');
  t.same(
    await page.$$eval('[data-testid=span-text] mark', (els) =>
      els.map((e) => `${e.firstChild?.textContent}:${(e as HTMLElement).dataset.label}`),
    ),
    ['Alice:person', 'Paris:city'],
  );
  t.match(await waitForText(page, 'p.muted', 'cost'), /tokens · cost \$0\.0000\d+/);
  const stored = await page.evaluate(
    () => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + location.href,
  );
  t.notMatch(stored, /loom_sk_/, 'the playground key is in no storage or URL');
});

t.test('decoder: a streamed chat with usage and cost', async (t) => {
  await clickText(page, '.tabs button', 'Decoder');
  await fill(page, 'input[list=pg-models]', DECODER);
  await fill(page, 'input[placeholder=Message]', 'hello there friend');
  await clickText(page, 'form button', 'Send');
  t.match(await waitForText(page, '[data-testid=chat]', /assistant\s*hello there friend/), /user\s*hello there friend/);
  t.match(
    await waitForText(page, '[data-testid=chat-usage]', 'cost'),
    /3 prompt \(0 cached\) \+ 3 completion tokens · cost \$0\.\d+/,
  );
});

t.test("an API error is shown as the API's message", async (t) => {
  await fill(page, 'input[list=pg-models]', 'no-such/model');
  await fill(page, 'input[placeholder=Message]', 'hi');
  await clickText(page, 'form button', 'Send');
  t.match(await waitForText(page, '[role=alert]', 'no-such/model'), /no-such\/model/);
  t.same(b.errors, []);
});
