// Reviewing inferences in Chromium: an inference whose text carries markup renders as text (no
// script runs, no element is created); a reviewer deletes a wrong entity span, adds a missing one by
// selecting text, saves the correction, and the API returns it as the feedback; the keyboard queue
// marks another inference correct with one key.
import t from 'tap';
import { call, makeUser, startServer } from '../service/helpers.ts';
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

const MODEL = 'fastino/gliner2-base-v1';
(ts.runtime as FakeRuntime).setReady(MODEL);
const XSS = 'Alice met Bob in Paris <script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">';
const infer = async (text: string) => {
  const r = await call(ts.url, 'POST', '/inference', {
    key: u.key,
    body: { model_id: MODEL, text, schema: ['person', 'city'] },
  });
  if (r.status !== 200) throw new Error(`inference failed: ${r.status} ${r.text}`);
  return r.body.inference_id as string;
};
const first = await infer('Carol flew to Rome');
const xssId = await infer(XSS);

t.before(() => signIn(page, ts.url, u.email, u.password));

t.test('an inference text with markup renders as text', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/inferences`);
  await waitForText(page, '[data-testid=inferences-table]', '<script>window.__xss = 1</script>');
  await page.goto(`${ts.url}/dashboard/#/inferences/${xssId}`);
  t.match(await waitForText(page, '[data-testid=span-text]', 'onerror'), /<img src=x onerror="window.__xss = 2">/);
  await new Promise((r) => setTimeout(r, 200)); // an image error handler would have run by now
  t.equal(
    await page.evaluate(() => (window as unknown as { __xss?: number }).__xss),
    undefined,
    'no injected script ran',
  );
  t.equal(await page.$$eval('#app script, #app img', (els) => els.length), 0, 'no element was created from the text');
  t.same(b.errors, []);
});

t.test("history filters go to the API, and its 422 is shown as the API's message", async (t) => {
  await page.goto(`${ts.url}/dashboard/#/inferences`);
  await page.waitForSelector('[data-testid=inferences-table]');
  await fill(page, 'input[name=model_id]', 'some-other-model');
  await clickText(page, 'button', 'Apply');
  await waitForText(page, '.card', 'No inferences match.');
  await fill(page, 'input[name=model_id]', MODEL);
  await fill(page, 'input[name=latency_min]', '50');
  await fill(page, 'input[name=latency_max]', '1');
  await clickText(page, 'button', 'Apply');
  t.match(await waitForText(page, '[role=alert]', 'maximum'), /A minimum is greater than its maximum \(HTTP 422\)/);
  await fill(page, 'input[name=latency_min]', '0');
  await fill(page, 'input[name=latency_max]', '100000');
  await clickText(page, 'button', 'Apply');
  t.equal(
    await waitForText(page, 'h2', '2 inference(s)'),
    '2 inference(s)',
    'both inferences of the model within the latency range',
  );
});

t.test('correct an entity span and see the feedback through the API', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/inferences/${xssId}`);
  await page.waitForSelector('[data-testid=span-text] mark');
  const marks = await page.$$eval('[data-testid=span-text] mark', (els) =>
    els.map((e) => `${e.firstChild?.textContent}:${(e as HTMLElement).dataset.label}`),
  );
  t.same(marks, ['Alice:person', 'Bob:person', 'Paris:city'], 'the model output as highlighted spans');

  // "Bob" is not what the reviewer wants: delete it
  await page.$$eval('[data-testid=span-text] mark', (els) => (els[1] as HTMLElement).click());
  await page.click('[data-testid=span-delete]');
  // select "window" inside the script text and add it as a city (a span over arbitrary text)
  await page.evaluate(() => {
    const seg = [...document.querySelectorAll('[data-testid=span-text] span[data-start]')].find((s) =>
      s.textContent!.includes('window'),
    )!;
    const node = seg.firstChild!;
    const i = node.textContent!.indexOf('window');
    const range = document.createRange();
    range.setStart(node, i);
    range.setEnd(node, i + 'window'.length);
    getSelection()!.removeAllRanges();
    getSelection()!.addRange(range);
    seg.dispatchEvent(new MouseEvent('mouseup', { bubbles: true }));
  });
  await page.waitForSelector('[data-testid=span-add]');
  await page.select('[data-testid=span-add] select', 'city');
  await clickText(page, '[data-testid=span-add] button', 'Add span');
  // relabel "Paris" as a person
  await page.$$eval('[data-testid=span-text] mark', (els) =>
    (els.find((e) => e.firstChild?.textContent === 'Paris') as HTMLElement).click(),
  );
  await page.select('[data-testid=span-selected] select', 'person');
  await page.type('textarea[name=notes]', 'Bob is not a person here');
  await clickText(page, 'button', 'Incorrect, save correction');
  await waitForText(page, '[data-testid=feedback]', 'incorrect');

  const fb = await call(ts.url, 'GET', `/inferences/${xssId}/feedback`, { key: u.key });
  t.equal(fb.status, 200);
  t.equal(fb.body.human_verdict, 'incorrect');
  t.equal(fb.body.notes, 'Bob is not a person here');
  const w = XSS.indexOf('window');
  t.same(fb.body.corrected_output, {
    entities: {
      person: [
        { text: 'Alice', start: 0, end: 5 },
        { text: 'Paris', start: 17, end: 22 },
      ],
      city: [{ text: 'window', start: w, end: w + 6 }],
    },
  });
});

t.test("the judge's verdict, score and reasoning are shown when the record has them", async (t) => {
  // a real judgement through the API (the Judge button, the verdict filter) is in projects.test.ts; a
  // real judge's reasoning cannot be steered to hold markup, so here the browser's copy of the record
  // gets the fields, to check that reasoning with markup stays text
  await page.setRequestInterception(true);
  const onRequest = async (req: import('puppeteer-core').HTTPRequest) => {
    if (req.method() !== 'GET' || !req.url().endsWith(`/inferences/${first}`)) return void req.continue();
    const rec = (await call(ts.url, 'GET', `/inferences/${first}`, { key: u.key })).body;
    const judged = {
      ...rec,
      llmaj_verdict: 'incorrect',
      llmaj_score: 0.25,
      llmaj_reasoning: '<b>Rome</b> is a city',
      llmaj_model: 'judge-1',
    };
    void req.respond({ status: 200, contentType: 'application/json', body: JSON.stringify(judged) });
  };
  page.on('request', onRequest);
  try {
    await page.goto(`${ts.url}/dashboard/#/inferences/${first}`);
    const text = await waitForText(page, '[data-testid=judge]', 'score');
    t.match(text, /LLM judge \(judge-1\): incorrect score 0\.25/);
    t.match(text, /<b>Rome<\/b> is a city/, 'the reasoning renders as text');
  } finally {
    page.off('request', onRequest);
    await page.setRequestInterception(false);
  }
});

t.test('the keyboard review queue marks an inference correct', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/review`);
  await waitForText(page, '[data-testid=queue-pos]', '1 of 2');
  // most recent first: the XSS one, then "Carol flew to Rome"
  await page.keyboard.press('j');
  await waitForText(page, '[data-testid=queue-pos]', '2 of 2');
  await waitForText(page, '[data-testid=span-text]', 'Carol flew to Rome');
  await page.keyboard.press('c');
  await waitForText(page, '[data-testid=feedback]', 'correct');
  const fb = await call(ts.url, 'GET', `/inferences/${first}/feedback`, { key: u.key });
  t.equal(fb.body.human_verdict, 'correct');
  t.equal(fb.body.corrected_output, null);
});
