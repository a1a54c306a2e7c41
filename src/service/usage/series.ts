// Usage and cost over time: the team's usage records (one per billed call, written where billing
// settles, each with the API key and model of the call) summed per bucket (hour or day, UTC) and
// per group (key or model). A pure function over the records; GET /usage serves it.
import { ValidationError } from '../errors.ts';
import type { UsageRecord } from '../../store/types.ts';

export const USAGE_INTERVALS = { hour: 3_600_000, day: 86_400_000 } as const;
export type UsageInterval = keyof typeof USAGE_INTERVALS;
export type UsageGroupBy = 'key' | 'model';
/** at most this many buckets in one answer (a year of days, two weeks of hours) */
export const MAX_BUCKETS = 366;
/** the group of calls made without an API key (a dashboard session) */
export const SESSION_GROUP = 'session';

export interface UsageBucket { start: string; group: string; requests: number; tokens: number; cost: number }
export interface UsageSeries {
  group_by: UsageGroupBy;
  interval: UsageInterval;
  since: string;
  until: string;
  /** every group with usage in the range, most costly first, with its totals */
  groups: Array<{ id: string; name: string; requests: number; tokens: number; cost: number }>;
  /** one row per bucket and group with usage; buckets without usage are left out */
  buckets: UsageBucket[];
}

/** `since`/`until` in ms (until exclusive); `nameOf` names a group (a key's name and last digits) */
export function usageSeries(
  records: UsageRecord[],
  opts: { group_by: UsageGroupBy; interval: UsageInterval; since: number; until: number },
  nameOf: (group: string) => string,
): UsageSeries {
  const step = USAGE_INTERVALS[opts.interval];
  if (opts.until <= opts.since) {
    throw new ValidationError('until must be after since', [{ path: '/until', message: 'must be after since' }]);
  }
  const first = Math.floor(opts.since / step) * step;
  if ((opts.until - first) / step > MAX_BUCKETS) {
    const msg = `at most ${MAX_BUCKETS} ${opts.interval} buckets per request; narrow since/until or use interval=day`;
    throw new ValidationError(msg, [{ path: '/since', message: msg }]);
  }
  const cells = new Map<string, UsageBucket & { micro: number }>();
  const totals = new Map<string, { requests: number; tokens: number; micro: number }>();
  for (const r of records) {
    const t = Date.parse(r.created_at);
    if (t < opts.since || t >= opts.until) continue;
    const group = opts.group_by === 'key' ? (r.key_id ?? SESSION_GROUP) : r.model_id;
    const start = Math.floor(t / step) * step;
    const id = `${start}\u0000${group}`;
    let c = cells.get(id);
    if (!c) {
      c = { start: new Date(start).toISOString(), group, requests: 0, tokens: 0, cost: 0, micro: 0 };
      cells.set(id, c);
    }
    c.requests++;
    c.tokens += r.usage.total_tokens;
    c.micro += r.cost_micro;
    let g = totals.get(group);
    if (!g) totals.set(group, (g = { requests: 0, tokens: 0, micro: 0 }));
    g.requests++;
    g.tokens += r.usage.total_tokens;
    g.micro += r.cost_micro;
  }
  const buckets = [...cells.values()]
    .sort((a, b) => a.start.localeCompare(b.start) || a.group.localeCompare(b.group))
    .map(({ micro, ...b }) => ({ ...b, cost: micro / 1e6 }));
  const groups = [...totals]
    .sort((a, b) => b[1].micro - a[1].micro || a[0].localeCompare(b[0]))
    .map(([id, g]) => ({ id, name: nameOf(id), requests: g.requests, tokens: g.tokens, cost: g.micro / 1e6 }));
  return {
    group_by: opts.group_by,
    interval: opts.interval,
    since: new Date(opts.since).toISOString(),
    until: new Date(opts.until).toISOString(),
    groups,
    buckets,
  };
}
