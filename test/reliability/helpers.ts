// Shared helpers of the reliability suite (test/reliability/*.test.ts and `npm run bench -- reliability`):
// a real server process (`server/main.ts` under tsx, the way `npm start` runs it) on a temp LOOM_DATA_DIR
// with tiny real models, that a test can kill -9 and restart on the same directory; accounts seeded
// through the services before the process starts; and the check that an error body has the shape
// section 7 of the spec documents for its route.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from '../../src/service/config.ts';
import { createServices } from '../../src/service/index.ts';
import { FakeRuntime } from '../service/fake-runtime.ts';
import { call, type Res } from '../service/helpers.ts';

const ROOT = join(import.meta.dirname, '../..');
const SHARED = join(ROOT, '../shared');
export const ENCODER_DIR = join(SHARED, 'goldens/gliner2-tiny-span');
export const DECODER_DIR = join(SHARED, 'models/tinystories-656k');
export const ENCODER_ID = 'tiny/gliner2';
export const DECODER_ID = 'tinystories-656k';

/** A temp data dir whose models folder holds the tiny GLiNER2 and TinyStories-656K (symlinks). */
export function makeDataDir(prefix = 'loom-rel-'): string {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  const models = join(dataDir, 'models');
  mkdirSync(join(models, 'tiny'), { recursive: true });
  symlinkSync(ENCODER_DIR, join(models, ENCODER_ID));
  symlinkSync(DECODER_DIR, join(models, DECODER_ID));
  return dataDir;
}

/**
 * Rate limits high enough that a suite's own traffic is never refused (429 is tested elsewhere):
 * the default table (every scope and endpoint group) with every budget raised.
 */
const OPEN_POINTS = 10_000_000;
export const OPEN_RATE_LIMITS: RateLimitConfig = {
  edge: { ...DEFAULT_RATE_LIMITS.edge, points: OPEN_POINTS },
  default: DEFAULT_RATE_LIMITS.default.map((r) => ({ ...r, points: OPEN_POINTS })),
  endpoints: DEFAULT_RATE_LIMITS.endpoints.map((r) => ({ ...r, points: OPEN_POINTS })),
};

export interface SeedUser {
  email: string;
  password: string;
  team_id: string;
  user_id: string;
}

/** Users (with paid credits) written into the store of `dataDir` before any server runs on it. */
export async function seedUsers(
  dataDir: string,
  users: Array<{ credits?: number; plan?: string }>,
): Promise<SeedUser[]> {
  const services = await createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  const out: SeedUser[] = [];
  try {
    for (const [i, u] of users.entries()) {
      const email = `rel${i}-${process.pid}-${Date.now()}@example.com`;
      const password = 'correct horse battery';
      const { user, team } = await services.auth.createUser({ email, password, plan: u.plan });
      if (u.credits) await services.billing.grant(team.id, u.credits);
      out.push({ email, password, team_id: team.id, user_id: user.id });
    }
  } finally {
    await services.close();
  }
  return out;
}

export interface Session {
  cookie: string;
  csrf: string;
  key: string;
  key_id: string;
  team_id: string;
}

/** log in over HTTP and create an API key with the dashboard session */
export async function login(url: string, u: SeedUser): Promise<Session> {
  const r = await call(url, 'POST', '/auth/login', { body: { email: u.email, password: u.password } });
  if (r.status !== 200) throw new Error(`login failed: ${r.status} ${r.text}`);
  const cookie = (r.headers.get('set-cookie') ?? '').split(';')[0];
  const csrf = r.body.csrf_token as string;
  const k = await call(url, 'POST', '/create-api-key', {
    body: { name: 'rel' },
    headers: { Cookie: cookie, 'X-CSRF-Token': csrf },
  });
  if (k.status !== 200) throw new Error(`create key failed: ${k.status} ${k.text}`);
  return { cookie, csrf, key: k.body.secret_key, key_id: k.body.id, team_id: u.team_id };
}

/** A Loom server process (`npm start`'s entry point) on `dataDir`. */
export class ServerProcess {
  proc!: ChildProcess;
  url = '';
  /** everything the process wrote (banner, pino lines) */
  output = '';
  /** the output of earlier runs (before a restart) */
  previousOutput = '';
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }> = Promise.resolve({ code: null, signal: null });
  exited = false;
  constructor(
    readonly dataDir: string,
    readonly env: Record<string, string> = {},
  ) {}

  async start(timeoutMs = 60_000): Promise<this> {
    this.exited = false;
    this.url = '';
    this.previousOutput += this.output;
    this.output = '';
    // node itself with tsx's loader (not the tsx CLI, which runs the server in a child process that a
    // SIGKILL of the CLI would leave running): kill -9 must hit the server
    this.proc = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'server/main.ts')], {
      cwd: ROOT,
      env: {
        ...process.env,
        LOOM_DATA_DIR: this.dataDir,
        LOOM_PORT: '0',
        LOOM_HOST: '127.0.0.1',
        LOOM_WORKER_THREADS: '1',
        LOOM_LOG_LEVEL: process.env.LOOM_REL_LOG_LEVEL ?? 'warn',
        LOOM_RATE_LIMITS: JSON.stringify(OPEN_RATE_LIMITS),
        ...this.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const onData = (d: Buffer) => {
      this.output += d.toString();
      if (this.output.length > 4e6) this.output = this.output.slice(-2e6);
    };
    this.proc.stdout!.on('data', onData);
    this.proc.stderr!.on('data', onData);
    this.exit = new Promise((resolve) =>
      this.proc.once('exit', (code, signal) => {
        this.exited = true;
        resolve({ code, signal });
      }),
    );
    const until = Date.now() + timeoutMs;
    while (!this.url) {
      const m = /Loom listening on (http:\/\/\S+)/.exec(this.output);
      if (m) this.url = m[1];
      else if (this.exited) throw new Error(`server exited at start:\n${this.output.slice(-3000)}`);
      else if (Date.now() > until)
        throw new Error(`server did not start in ${timeoutMs} ms:\n${this.output.slice(-3000)}`);
      else await sleep(50);
    }
    return this;
  }

  /** kill -9 and wait until the process is gone */
  async kill9(): Promise<void> {
    if (this.exited) return;
    this.proc.kill('SIGKILL');
    await this.exit;
  }

  /** SIGTERM (graceful drain), SIGKILL after `ms` */
  async stop(ms = 20_000): Promise<void> {
    if (this.exited) return;
    this.proc.kill('SIGTERM');
    const t = setTimeout(() => this.proc.kill('SIGKILL'), ms);
    await this.exit;
    clearTimeout(t);
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** `fn` until `done` or the deadline; returns the last result */
export async function until<T>(
  fn: () => Promise<T>,
  done: (r: T) => boolean,
  timeoutMs: number,
  everyMs = 100,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await fn();
    if (done(r) || Date.now() > end) return r;
    await sleep(everyMs);
  }
}

export { call, type Res };

/** A catalog file giving the tiny models a known price (credits per 1M tokens). */
export function writeCatalog(dataDir: string, pricing: { input: number; output: number }): string {
  const f = join(dataDir, 'catalog.json');
  writeFileSync(
    f,
    JSON.stringify({
      models: [
        { id: ENCODER_ID, pricing },
        { id: DECODER_ID, pricing },
      ],
    }),
  );
  return f;
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

// ---- error bodies (spec section 7) -------------------------------------------------------------

const OPENAI_PATHS = ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/embeddings', '/v1/models'];
export type ErrorFamily = 'native' | 'openai' | 'messages';

/** Which envelope an error of a request to `path` (with or without the messages-version header) carries. */
export function errorFamily(path: string, messagesHeader: boolean): ErrorFamily {
  if (messagesHeader) return 'messages';
  const p = path.split('?')[0];
  return OPENAI_PATHS.some((o) => p === o || p.startsWith(o + '/')) ? 'openai' : 'native';
}

const isStr = (v: unknown) => typeof v === 'string' && v.length > 0;

/**
 * null when `status` / `body` / `headers` form a documented answer; else what is wrong. 5xx other
 * than the documented overload answers (503/529 with Retry-After) is always wrong.
 */
export function errorBodyProblem(
  family: ErrorFamily,
  status: number,
  body: unknown,
  headers: Headers | Record<string, string>,
): string | null {
  const h = (n: string) => (headers instanceof Headers ? headers.get(n) : headers[n.toLowerCase()]) ?? null;
  if (status >= 500 && !((status === 503 || status === 529) && h('retry-after'))) return `status ${status}`;
  if (status < 400) return null;
  if (!body || typeof body !== 'object' || Array.isArray(body)) return `${status} body is not a JSON object`;
  const b = body as Record<string, any>;
  if (family === 'openai') {
    const e = b.error;
    if (!e || typeof e !== 'object') return `${status} without the error envelope`;
    for (const k of ['code', 'type', 'param', 'message']) if (!(k in e)) return `${status} error envelope lacks ${k}`;
    if (!isStr(e.message) || !isStr(e.type)) return `${status} error envelope with an empty type/message`;
    return null;
  }
  if (family === 'messages') {
    if (b.type !== 'error' || !b.error || !isStr(b.error.type) || !isStr(b.error.message))
      return `${status} not a messages-style error`;
    return null;
  }
  if (status === 429) {
    if (!isStr(b.detail) || !isStr(b.code) || !isStr(b.scope)) return '429 without detail/code/scope';
    if (!h('retry-after')) return '429 without Retry-After';
    return null;
  }
  if ((status === 402 || status === 403) && 'code' in b) {
    return isStr(b.code) && isStr(b.message) && isStr(b.resolution_url)
      ? null
      : `${status} billing body lacks code/message/resolution_url`;
  }
  if (!isStr(b.detail)) return `${status} without a detail string`;
  if (status === 422 && !Array.isArray(b.errors)) return '422 without an errors array';
  return null;
}
