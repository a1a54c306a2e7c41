// Accounts, API keys, dashboard sessions and CSRF. Keys are `loom_sk_` + 256 random bits, stored
// only as their sha256. Authenticated keys are cached in memory (secret → key, team) while the
// store's auth generation is unchanged: every write of a key or team record, from any process,
// changes it (src/store/db.ts), so revocation and blocking apply on the very next request. The
// generation itself is read at most once a millisecond (src/service/read-cache.ts).
import {
  type Store, type ApiKeyRecord, type TeamRecord, type UserRecord, type SessionRecord,
} from '../store/index.ts';
import type { ServiceConfig } from './config.ts';
import { cachedRead } from './read-cache.ts';
import type { BillingService } from './billing.ts';
import { ForbiddenError, NotFoundError, RateLimitError, UnauthorizedError, ValidationError } from './errors.ts';
import { hashPassword, KEY_PREFIX, newApiKeySecret, newId, nowIso, randomToken, safeEqual, sha256, verifyPassword } from './ids.ts';

/** Who is calling. Key calls carry key_id; dashboard calls carry the session. */
export interface Principal {
  kind: 'key' | 'session';
  team_id: string;
  user_id: string;
  key_id: string | null;
  team: TeamRecord;
  session: SessionRecord | null;
}

export interface KeyView {
  id: string;
  name: string;
  created_at: string;
  api_key_last_digits: string;
  expires_at: string | null;
  team_id: string | null;
}

const LAST_DIGITS = 4;

function keyView(k: ApiKeyRecord): KeyView {
  return { id: k.id, name: k.name, created_at: k.created_at, api_key_last_digits: k.last_digits, expires_at: k.expires_at, team_id: k.team_id };
}

const USAGE_FLUSH_MS = 250;
/** authenticated keys kept in memory; past this many the cache starts again empty */
const MAX_CACHED_KEYS = 10_000;

/** a key that authenticated, as of one auth generation of the store */
interface CachedKey {
  generation: number;
  /** expires_at as epoch ms (Infinity: never) */
  expiresMs: number;
  principal: Principal;
}

/** a new session: the cookie token (set by the HTTP layer), its record and its user */
export interface SignedIn { token: string; session: SessionRecord; user: UserRecord }

/** Failed sign-ins allowed per client IP and per email in one window; past it, 429 until the window ends. */
export const LOGIN_FAILURES = { points: 10, duration_s: 900 };

/** Counts failed logins per key (`ip:…`, `email:…`) in fixed windows. */
function createLoginThrottle() {
  const fails = new Map<string, { n: number; resetAt: number }>();
  const live = (k: string, now: number) => {
    const w = fails.get(k);
    if (w && w.resetAt <= now) { fails.delete(k); return undefined; }
    return w;
  };
  return {
    check(keys: string[]): void {
      const now = Date.now();
      for (const k of keys) {
        const w = live(k, now);
        if (w && w.n >= LOGIN_FAILURES.points) {
          const { points, duration_s } = LOGIN_FAILURES;
          throw new RateLimitError('login_rate_limit', 'ip', (w.resetAt - now) / 1000, points, duration_s);
        }
      }
    },
    fail(keys: string[]): void {
      const now = Date.now();
      for (const k of keys) {
        const w = live(k, now);
        if (w) w.n++;
        else fails.set(k, { n: 1, resetAt: now + LOGIN_FAILURES.duration_s * 1000 });
      }
      if (fails.size > 100_000) for (const k of [...fails.keys()]) live(k, now);
    },
    clear(key: string): void { fails.delete(key); },
  };
}

export function createAuthService(store: Store, config: ServiceConfig, billing: BillingService) {
  // Key request counters (request_count, last_used_at) are added up in memory and written in one
  // transaction per USAGE_FLUSH_MS for all keys: a write transaction per authenticated request
  // cost more than the rest of the request. Reads of the counters (listKeys) flush first; close()
  // flushes; a kill -9 loses at most the last interval's counts (never billing: usage_tokens and
  // usage_cost are written by billing with the call).
  const pendingUse = new Map<string, { requests: number; atMs: number }>();
  let flushing: Promise<void> | null = null;
  function flushUsage(): Promise<void> {
    if (pendingUse.size === 0) return flushing ?? Promise.resolve();
    const batch = [...pendingUse].map(([id, u]) => ({ id, requests: u.requests, at: new Date(u.atMs).toISOString() }));
    pendingUse.clear();
    const p = store.tx(async (t) => { for (const u of batch) await t.keys.bump(u.id, u); }).then(() => {}, () => {});
    flushing = p.finally(() => { if (flushing === p) flushing = null; });
    return p;
  }
  const flusher = setInterval(() => { void flushUsage(); }, USAGE_FLUSH_MS);
  flusher.unref();
  // secret → its key and team, valid for one auth generation; only keys that authenticated are kept
  // (an unknown secret is looked up every time, so guessing cannot fill the cache)
  const keyCache = new Map<string, CachedKey>();
  // read at most once a millisecond, and again after this process commits: as fresh as a read
  const generationNow = cachedRead(store, () => store.db.authGeneration());

  /** the store's answer for a secret: its principal, or the 401 that says why not */
  async function lookupKey(secret: string, generation: number): Promise<CachedKey> {
    const k = await store.keys.byHash(sha256(secret));
    if (!k) throw new UnauthorizedError('Invalid API key');
    if (k.revoked_at) throw new UnauthorizedError('API key has been revoked');
    const expiresMs = k.expires_at ? Date.parse(k.expires_at) : Infinity;
    if (expiresMs <= Date.now()) throw new UnauthorizedError('API key has expired');
    const team = await store.teams.get(k.team_id);
    if (!team) throw new UnauthorizedError('Invalid API key');
    if (team.blocked) throw new UnauthorizedError('Account blocked for billing or fraud review');
    const principal: Principal = {
      kind: 'key', team_id: k.team_id, user_id: k.user_id, key_id: k.id, team, session: null,
    };
    return { generation, expiresMs, principal };
  }
  /** the principal of `secret` as of auth generation `generation`: cached, else looked up */
  function authenticateAt(secret: string, generation: number): Principal | Promise<Principal> {
    const c = keyCache.get(secret);
    if (c !== undefined && c.generation === generation) return admit(c);
    return lookupKey(secret, generation).then((fresh) => {
      if (keyCache.size >= MAX_CACHED_KEYS) keyCache.clear();
      keyCache.set(secret, fresh);
      return admit(fresh);
    });
  }
  function admit(c: CachedKey): Principal {
    const now = Date.now();
    if (c.expiresMs <= now) throw new UnauthorizedError('API key has expired');
    const p = c.principal;
    const use = pendingUse.get(p.key_id!);
    if (use) { use.requests++; use.atMs = now; } else pendingUse.set(p.key_id!, { requests: 1, atMs: now });
    // a copy: a caller may not change what the next request gets
    return { kind: 'key', team_id: p.team_id, user_id: p.user_id, key_id: p.key_id, team: p.team, session: null };
  }
  async function createTeam(name: string, opts: { plan?: string; region?: string | null } = {}): Promise<TeamRecord> {
    const team: TeamRecord = { id: newId(), name, region: opts.region ?? null, blocked: false, created_at: nowIso() };
    await store.tx((t) => {
      t.teams.put(team);
      billing.openAccountTx(t, team.id, opts.plan ?? config.defaultPlan);
    });
    return team;
  }
  const loginThrottle = createLoginThrottle();
  let setupRunning = false;

  return {
    createTeam,

    /** `loom admin create-user`: a user in a new (or an existing) team */
    async createUser(input: { email: string; password: string; team_id?: string; team_name?: string; plan?: string; region?: string | null }): Promise<{ user: UserRecord; team: TeamRecord }> {
      const email = input.email.trim().toLowerCase();
      if (!/^[^@\s]+@[^@\s]+$/.test(email)) throw new ValidationError('Invalid email', [{ path: '/email', message: 'must be an email address' }]);
      if (input.password.length < 8) throw new ValidationError('Password too short', [{ path: '/password', message: 'must be at least 8 characters' }]);
      if (await store.users.byEmail(email)) throw new ValidationError(`User ${email} already exists`, [{ path: '/email', message: 'already exists' }]);
      let team: TeamRecord;
      if (input.team_id) {
        const t = await store.teams.get(input.team_id);
        if (!t) throw new NotFoundError(`Team ${input.team_id} not found`);
        team = t;
      } else {
        team = await createTeam(input.team_name ?? email, { plan: input.plan, region: input.region });
      }
      const user: UserRecord = { id: newId(), email, password_hash: await hashPassword(input.password), team_id: team.id, created_at: nowIso() };
      const taken = await store.tx(async (t) => {
        if (await t.users.byEmail(email)) return true;
        t.users.put(user);
        return false;
      });
      if (taken) throw new ValidationError(`User ${email} already exists`, [{ path: '/email', message: 'already exists' }]);
      return { user, team };
    },

    /** GET /auth/setup: true while the store has no user (the dashboard then offers to create the first) */
    async needsSetup(): Promise<boolean> { return !(await store.users.any()); },

    /** POST /auth/setup: the first user of an empty store, in a new team; later users come from an admin */
    async setupFirstUser(input: { email: string; password: string; team_name?: string }) {
      const refuse = () => new ForbiddenError(
        'This server already has users: sign in, or ask an admin to create your account (loom admin create-user)',
      );
      if (setupRunning) throw refuse();
      setupRunning = true;
      try {
        if (await store.users.any()) throw refuse();
        return await this.createUser(input);
      } finally { setupRunning = false; }
    },

    /**
     * POST /auth/login: returns the cookie token (set by the HTTP layer) and the CSRF token. Failed
     * attempts are counted per client IP and per email (LOGIN_FAILURES); past the budget, 429.
     */
    async login(email: string, password: string, ip = ''): Promise<SignedIn> {
      const norm = email.trim().toLowerCase();
      const throttleKeys = [`ip:${ip}`, `email:${norm}`];
      loginThrottle.check(throttleKeys);
      const user = await store.users.byEmail(norm);
      // verify against a dummy hash when the user is unknown, so timing does not reveal accounts
      const ok = await verifyPassword(password, user?.password_hash ?? 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=');
      if (!user || !ok) {
        loginThrottle.fail(throttleKeys);
        throw new UnauthorizedError('Invalid email or password');
      }
      loginThrottle.clear(`email:${norm}`);
      const team = await store.teams.get(user.team_id);
      if (!team || team.blocked) throw new UnauthorizedError('Account blocked');
      const token = randomToken(32);
      const now = Date.now();
      const session: SessionRecord = {
        id: sha256(token), user_id: user.id, team_id: user.team_id, csrf_token: randomToken(24),
        created_at: new Date(now).toISOString(), expires_at: new Date(now + config.sessionTtlS * 1000).toISOString(),
      };
      await store.tx((t) => t.sessions.put(session));
      return { token, session, user };
    },

    async logout(token: string): Promise<void> {
      await store.tx((t) => t.sessions.remove(sha256(token)));
    },

    /** the principal of a session cookie, or null when absent/expired */
    async fromSession(token: string | null): Promise<Principal | null> {
      if (!token) return null;
      const s = await store.sessions.get(sha256(token));
      if (!s || Date.parse(s.expires_at) <= Date.now()) return null;
      const team = await store.teams.get(s.team_id);
      if (!team || team.blocked) return null;
      return { kind: 'session', team_id: s.team_id, user_id: s.user_id, key_id: null, team, session: s };
    },

    /** GET /auth/session: who is signed in, the CSRF token (a reloaded page gets it again here) and the expiry */
    async sessionView(p: Principal) {
      return {
        user_id: p.user_id, team_id: p.team_id, email: (await store.users.get(p.user_id))?.email ?? null,
        csrf_token: p.session!.csrf_token, expires_at: p.session!.expires_at,
      };
    },

    /** CSRF check for state-changing dashboard calls */
    checkCsrf(p: Principal, header: string | null): void {
      if (p.kind !== 'session' || !p.session) return;
      if (!header || !safeEqual(header, p.session.csrf_token)) throw new ForbiddenError('Missing or invalid CSRF token (send the X-CSRF-Token header from the login response)');
    },

    /**
     * X-API-Key / Bearer: 401 for unknown, revoked, expired keys and blocked accounts. Synchronous
     * on a cache hit where the store reads the auth generation synchronously (LMDB); a promise when
     * the key must be looked up or the generation read from the database (PostgreSQL).
     */
    authenticateKey(secret: string | null): Principal | Promise<Principal> {
      if (!secret) throw new UnauthorizedError('Missing API key: send it in the X-API-Key header');
      if (!secret.startsWith(KEY_PREFIX)) throw new UnauthorizedError('Invalid API key');
      const generation = generationNow();
      if (typeof generation !== 'number') return generation.then((g) => authenticateAt(secret, g));
      return authenticateAt(secret, generation);
    },

    /** POST /create-api-key: dashboard session only (403 for key-authenticated calls) */
    async createKey(p: Principal, input: { name: string; expires_at?: string | null }): Promise<KeyView & { secret_key: string; billing_customer_created: boolean }> {
      if (p.kind !== 'session') throw new ForbiddenError('API keys can only be created from a dashboard session, not with an API key');
      let expires: string | null = null;
      if (input.expires_at) {
        const t = Date.parse(input.expires_at);
        if (!Number.isFinite(t) || t <= Date.now()) throw new ValidationError('expires_at must be a future ISO 8601 time', [{ path: '/expires_at', message: 'must be a future date-time' }]);
        expires = new Date(t).toISOString();
      }
      const secret = newApiKeySecret();
      const rec: ApiKeyRecord = {
        id: newId(), name: input.name, hash: sha256(secret), last_digits: secret.slice(-LAST_DIGITS), team_id: p.team_id, user_id: p.user_id,
        created_at: nowIso(), expires_at: expires, revoked_at: null, last_used_at: null, request_count: 0, usage_tokens: 0, usage_cost_micro: 0,
      };
      const created = await store.tx((t) => {
        t.keys.put(rec);
        return billing.ensureCustomerTx(t, p.team_id);
      });
      return { ...keyView(rec), secret_key: secret, billing_customer_created: created };
    },

    /** for the CLI: a key for a user without a browser session */
    async createKeyForUser(userId: string, name: string): Promise<KeyView & { secret_key: string; billing_customer_created: boolean }> {
      const user = await store.users.get(userId);
      if (!user) throw new NotFoundError(`User ${userId} not found`);
      const team = (await store.teams.get(user.team_id))!;
      return this.createKey({ kind: 'session', team_id: team.id, user_id: user.id, key_id: null, team, session: null }, { name });
    },

    async listKeys(p: Principal) {
      await flushUsage(); // request counters of earlier requests
      await store.settled();
      const keys = (await store.keys.listByTeam(p.team_id)).filter((k) => !k.revoked_at).map((k) => ({
        ...keyView(k),
        last_used_at: k.last_used_at,
        usage_tokens: k.usage_tokens,
        usage_cost: k.usage_cost_micro / 1e6,
        request_count: k.request_count,
      }));
      return { keys, count: keys.length };
    },

    /** DELETE /delete-api-key: immediate and irreversible */
    async revokeKey(p: Principal, keyId: string): Promise<{ success: boolean; message: string | null }> {
      const k = await store.keys.get(keyId);
      if (!k || k.team_id !== p.team_id || k.revoked_at) throw new NotFoundError(`API key ${keyId} not found`);
      await store.tx(async (t) => {
        const cur = (await t.keys.get(keyId))!;
        t.keys.put({ ...cur, revoked_at: nowIso() });
      });
      return { success: true, message: `API key ${k.name} revoked` };
    },

    /** write the pending key request counters (before the store closes) */
    async close(): Promise<void> { clearInterval(flusher); await flushUsage(); },

    async setTeamBlocked(teamId: string, blocked: boolean): Promise<void> {
      await store.tx(async (t) => {
        const team = await t.teams.get(teamId);
        if (!team) throw new NotFoundError(`Team ${teamId} not found`);
        t.teams.put({ ...team, blocked });
      });
    },

    async setTeamRegion(teamId: string, region: string | null): Promise<void> {
      await store.tx(async (t) => {
        const team = await t.teams.get(teamId);
        if (!team) throw new NotFoundError(`Team ${teamId} not found`);
        t.teams.put({ ...team, region: region ? region.toUpperCase() : null });
      });
    },
  };
}
export type AuthService = ReturnType<typeof createAuthService>;
