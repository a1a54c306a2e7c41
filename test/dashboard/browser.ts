// Helpers of the browser tests: Debian's Chromium driven by puppeteer-core (its own browser download
// does not work offline), one browser per test file, the dashboard built from the current sources.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type ElementHandle, type Page } from 'puppeteer-core';

const ROOT = join(import.meta.dirname, '..', '..');
const CANDIDATES = [
  process.env.LOOM_CHROMIUM,
  '/usr/bin/chromium',
  '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome',
];

/** the browser binary, or an error that says how to install one */
export function chromiumPath(): string {
  const p = CANDIDATES.find((c) => c && existsSync(c));
  if (!p)
    throw new Error(
      'No Chromium for the browser tests: install it with `apt-get install -y chromium` (Debian; .ci/run does ' +
        'this), or set LOOM_CHROMIUM to a Chrome/Chromium binary',
    );
  return p;
}

const newest = (p: string): number =>
  statSync(p).isDirectory() ? Math.max(0, ...readdirSync(p).map((n) => newest(join(p, n)))) : statSync(p).mtimeMs;

/** builds dashboard/dist when it is missing or older than its sources, so a test drives the code it sees */
export function ensureDashboardBuilt(): void {
  const dist = join(ROOT, 'dashboard', 'dist', 'index.html');
  const src = Math.max(
    newest(join(ROOT, 'dashboard', 'src')),
    newest(join(ROOT, 'dashboard', 'index.html')),
    newest(join(ROOT, 'dashboard', 'vite.config.ts')),
  );
  if (existsSync(dist) && statSync(dist).mtimeMs >= src) return;
  const r = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build-dashboard.mjs')], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (r.status !== 0 || !existsSync(dist)) throw new Error('npm run build:dashboard failed');
}

export interface BrowserSession {
  browser: Browser;
  page: Page;
  errors: string[];
  close(): Promise<void>;
}

export async function openBrowser(opts: { width?: number; height?: number } = {}): Promise<BrowserSession> {
  ensureDashboardBuilt();
  const userDataDir = mkdtempSync(join(tmpdir(), 'loom-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: chromiumPath(),
    headless: true,
    userDataDir,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
    defaultViewport: { width: opts.width ?? 1280, height: opts.height ?? 900 },
  });
  const page = await browser.newPage();
  // page errors and CSP violations fail the tests that check `errors`
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(String((e as Error).message ?? e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text());
  });
  return {
    browser,
    page,
    errors,
    async close() {
      await browser.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** the text of the first element matching `selector` once it contains `text` (waits up to `timeout`) */
export async function waitForText(
  page: Page,
  selector: string,
  text: string | RegExp,
  timeout = 10_000,
): Promise<string> {
  const src = text instanceof RegExp ? { re: text.source, flags: text.flags } : { s: text };
  const h = await page.waitForFunction(
    (sel: string, t: { re?: string; flags?: string; s?: string }) => {
      for (const el of document.querySelectorAll(sel)) {
        const v = (el as HTMLElement).innerText ?? el.textContent ?? '';
        if (t.re !== undefined ? new RegExp(t.re, t.flags).test(v) : v.includes(t.s!)) return v;
      }
      return false;
    },
    { timeout, polling: 50 },
    selector,
    src,
  );
  return (await h.jsonValue()) as string;
}

/** clicks the first `selector` element whose text contains `text` */
export async function clickText(page: Page, selector: string, text: string, timeout = 10_000): Promise<void> {
  const h = await page.waitForFunction(
    (sel: string, t: string) => {
      return (
        [...document.querySelectorAll(sel)].find(
          (el) => (el.textContent ?? '').includes(t) && !(el as HTMLButtonElement).disabled,
        ) ?? false
      );
    },
    { timeout, polling: 50 },
    selector,
    text,
  );
  const el = h.asElement() as ElementHandle<Element> | null;
  if (!el) throw new Error(`no ${selector} with text ${text}`);
  await el.click();
}

/** fills an input (clearing it first) */
export async function fill(page: Page, selector: string, value: string): Promise<void> {
  await page.waitForSelector(selector);
  await page.$eval(selector, (el) => {
    (el as HTMLInputElement).value = '';
  });
  await page.type(selector, value);
}

/** signs in through the page */
export async function signIn(page: Page, url: string, email: string, password: string): Promise<void> {
  await page.goto(`${url}/dashboard/`);
  await waitForText(page, 'button[type=submit]', 'Sign in');
  await fill(page, 'input[name=email]', email);
  await fill(page, 'input[name=password]', password);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=sign-out]');
}
