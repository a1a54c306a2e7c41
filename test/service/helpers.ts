// Shared helpers of the service tests: a server on a loopback port over a temp data dir, users,
// sessions and keys created through the public HTTP API.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type LoomServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';
import { createServices, type ServicesOptions } from '../../src/service/index.ts';
import type { ServiceConfig } from '../../src/service/config.ts';
import type { ModelRuntime } from '../../src/service/runtime.ts';
import { FakeRuntime } from './fake-runtime.ts';

export interface TestServer { server: LoomServer; url: string; runtime: ModelRuntime; dataDir: string; services: LoomServer['services']; close(): Promise<void> }

export async function startServer(opts: { runtime?: ModelRuntime; config?: Partial<ServiceConfig>; logDestination?: NodeJS.WritableStream; judge?: ServicesOptions['judge'] } = {}): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-svc-'));
  const runtime = opts.runtime ?? new FakeRuntime();
  const services = await createServices({ runtime, config: { dataDir, workerThreads: 1, ...opts.config }, judge: opts.judge });
  const log = createLogger({ level: opts.logDestination ? 'info' : 'silent', destination: opts.logDestination });
  const server = await createServer({ services, log });
  return {
    server, url: server.url, runtime, dataDir, services,
    async close() { await server.close({ timeoutMs: 2000 }); rmSync(dataDir, { recursive: true, force: true }); },
  };
}

export interface Res { status: number; body: any; headers: Headers; text: string }

export async function call(url: string, method: string, path: string, opts: { key?: string; body?: unknown; raw?: string; headers?: Record<string, string> } = {}): Promise<Res> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers['X-API-Key'] = opts.key;
  let body: string | undefined;
  if (opts.raw !== undefined) body = opts.raw;
  else if (opts.body !== undefined) body = JSON.stringify(opts.body);
  if (body !== undefined) headers['Content-Type'] ??= 'application/json';
  const r = await fetch(url + path, { method, headers, body });
  const text = await r.text();
  let parsed: unknown = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = text; }
  return { status: r.status, body: parsed, headers: r.headers, text };
}

export interface TestUser { email: string; password: string; user_id: string; team_id: string; cookie: string; csrf: string; key: string; key_id: string }

let seq = 0;
/** create a user (service call, as the admin CLI does), log in over HTTP, create a key over HTTP */
export async function makeUser(ts: TestServer, opts: { plan?: string; credits?: number; card?: boolean; team_id?: string; region?: string } = {}): Promise<TestUser> {
  const email = `user${++seq}-${Date.now()}@example.com`;
  const password = 'correct horse battery';
  const { user, team } = await ts.services.auth.createUser({ email, password, plan: opts.plan, team_id: opts.team_id, region: opts.region });
  if (opts.credits) await ts.services.billing.grant(team.id, opts.credits);
  if (opts.card) await ts.services.billing.setPlan(team.id, opts.plan ?? 'free', { card_on_file: true });
  const login = await call(ts.url, 'POST', '/auth/login', { body: { email, password } });
  if (login.status !== 200) throw new Error(`login failed: ${login.status} ${login.text}`);
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0];
  const csrf = login.body.csrf_token;
  const k = await call(ts.url, 'POST', '/create-api-key', { body: { name: 'test key' }, headers: { Cookie: cookie, 'X-CSRF-Token': csrf } });
  if (k.status !== 200) throw new Error(`create key failed: ${k.status} ${k.text}`);
  return { email, password, user_id: user.id, team_id: team.id, cookie, csrf, key: k.body.secret_key, key_id: k.body.id };
}
