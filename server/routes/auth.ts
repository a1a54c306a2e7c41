// Dashboard session and API keys: GET/POST /auth/setup (first user of an empty store), POST /auth/login,
// POST /auth/logout, GET /auth/session,
// POST /create-api-key (session + CSRF only), GET /list-api-keys, DELETE /delete-api-key, GET /account.
import type { Ctx, RouteDef } from '../router.ts';
import { SESSION_COOKIE } from '../router.ts';

export function authRoutes(): RouteDef[] {
  return [
    {
      method: 'GET', path: '/auth/setup', auth: 'none',
      handler: async ({ services }) => ({ needs_setup: await services.auth.needsSetup() }),
    },
    {
      // the first user of an empty store (403 once any user exists), signed in at once
      method: 'POST', path: '/auth/setup', auth: 'none',
      body: {
        type: 'object', required: ['email', 'password'],
        properties: {
          email: { type: 'string', minLength: 3, maxLength: 320 },
          password: { type: 'string', minLength: 8, maxLength: 1024 },
          team_name: { type: 'string', minLength: 1, maxLength: 200 },
        },
      },
      async handler(ctx) {
        await ctx.services.auth.setupFirstUser(ctx.body);
        return signIn(ctx);
      },
    },
    {
      method: 'POST', path: '/auth/login', auth: 'none',
      body: { type: 'object', required: ['email', 'password'], properties: { email: { type: 'string', minLength: 3, maxLength: 320 }, password: { type: 'string', minLength: 1, maxLength: 1024 } } },
      handler: signIn,
    },
    {
      method: 'POST', path: '/auth/logout', auth: 'session',
      async handler({ services, headers, setCookie }) {
        const tok = /(?:^|;\s*)loom_session=([^;]+)/.exec(headers.cookie ?? '')?.[1];
        if (tok) await services.auth.logout(tok);
        setCookie(`${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`);
        return { success: true };
      },
    },
    {
      method: 'GET', path: '/auth/session', auth: 'session',
      handler: ({ services, principal }) => services.auth.sessionView(principal),
    },
    {
      method: 'POST', path: '/create-api-key', auth: 'session',
      body: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, expires_at: { type: ['string', 'null'], format: 'date-time' } } },
      handler({ services, principal, body }) { return services.auth.createKey(principal, body); },
    },
    { method: 'GET', path: '/list-api-keys', auth: 'any', handler: ({ services, principal }) => services.auth.listKeys(principal) },
    {
      method: 'DELETE', path: '/delete-api-key', auth: 'any',
      body: { type: 'object', required: ['key_id'], properties: { key_id: { type: 'string', minLength: 1 } } },
      handler: ({ services, principal, body }) => services.auth.revokeKey(principal, body.key_id),
    },
    {
      method: 'GET', path: '/account', auth: 'any',
      handler: async ({ services, principal }) => ({
        team_name: principal.team.name, region: principal.team.region, ...(await services.billing.view(principal.team_id)),
      }),
    },
  ];
}

/** a session for the body's email and password: the HttpOnly cookie, and the CSRF token in the body */
async function signIn({ services, body, setCookie, ip }: Ctx) {
  const { token, session, user } = await services.auth.login(body.email, body.password, ip);
  const secure = services.config.cookieSecure ? '; Secure' : '';
  const ttl = services.config.sessionTtlS;
  setCookie(`${SESSION_COOKIE}=${token}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${ttl}${secure}`);
  return {
    user: { id: user.id, email: user.email }, team_id: session.team_id,
    csrf_token: session.csrf_token, expires_at: session.expires_at,
  };
}
