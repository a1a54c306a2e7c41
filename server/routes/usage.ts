// Usage over time and the rate limits in force, for the caller's team (the dashboard's Usage page;
// not in the spec's endpoint list, like GET /account): GET /usage, GET /rate-limits.
import type { RouteDef } from '../router.ts';

export function usageRoutes(): RouteDef[] {
  return [
    {
      method: 'GET', path: '/usage', auth: 'any',
      query: {
        group_by: { type: 'string', enum: ['key', 'model'], default: 'key' },
        interval: { type: 'string', enum: ['hour', 'day'], default: 'day' },
        since: { type: 'datetime' },
        until: { type: 'datetime' },
      },
      handler: ({ services, principal, query }) => services.billing.series(principal.team_id, query as any),
    },
    {
      method: 'GET', path: '/rate-limits', auth: 'any',
      handler: async ({ services, principal, ip }) => ({
        limits: await services.rateLimiter.table({
          ip, team_id: principal.team_id, key_id: principal.key_id, user_id: principal.user_id,
        }),
      }),
    },
  ];
}
