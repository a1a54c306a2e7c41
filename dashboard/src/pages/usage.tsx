// Usage and billing: the plan and credit balance (GET /account), usage and cost over time per model
// and per key (GET /usage, from the usage records billing writes with each call: every billed call,
// judge calls included), and the rate limits in force (GET /rate-limits, the limiter's one table).
import { api } from '../api.ts';
import { LineChart } from '../chart.tsx';
import { ErrorBox, Loading, Section, Table, fmtMoney, fmtNum, useResource } from '../ui.tsx';

const DAY = 86_400_000;

/** GET /usage's sparse buckets as one value array per group on a dense day axis */
export function daySeries(
  u: { since: string; until: string; groups: any[]; buckets: any[] },
  field: 'cost' | 'tokens',
) {
  const first = Math.floor(Date.parse(u.since) / DAY) * DAY;
  const n = Math.ceil((Date.parse(u.until) - first) / DAY);
  const x = Array.from({ length: n }, (_, i) => (first + i * DAY) / 1000);
  const series = u.groups.map((g) => ({ label: g.name as string, values: x.map(() => 0) as number[] }));
  for (const b of u.buckets) {
    const gi = u.groups.findIndex((g) => g.id === b.group);
    const i = Math.floor((Date.parse(b.start) - first) / DAY);
    if (gi >= 0 && i >= 0 && i < n) series[gi].values[i] += b[field];
  }
  return { x, series };
}

export function UsagePage() {
  const acct = useResource(() => api('GET', '/account'));
  const keys = useResource(() => api('GET', '/list-api-keys'));
  const perKey = useResource(() => api('GET', '/usage', { query: { group_by: 'key', interval: 'day' } }));
  const limits = useResource(() => api('GET', '/rate-limits'));
  const perModel = useResource(() => api('GET', '/usage', { query: { group_by: 'model', interval: 'day' } }));
  const a = acct.data;
  return (
    <>
      <h1>Usage &amp; billing</h1>
      <ErrorBox error={acct.error ?? keys.error ?? perModel.error ?? perKey.error ?? limits.error} />
      <Loading when={acct.loading && !a} />
      {a && (
        <Section title={`Plan: ${a.plan}`}>
          <dl class="kv" data-testid="billing">
            <dt>Team</dt>
            <dd>
              {a.team_name}
              {a.region ? ` (${a.region})` : ''}
            </dd>
            <dt>Available</dt>
            <dd>{fmtNum(a.credits.available, 2)} credits (1 credit = 0.01)</dd>
            <dt>Free allowance</dt>
            <dd>{fmtNum(a.credits.free_allowance, 2)}</dd>
            <dt>Included</dt>
            <dd>{fmtNum(a.credits.included, 2)}</dd>
            <dt>Paid balance</dt>
            <dd>{fmtNum(a.credits.paid_balance, 2)}</dd>
            <dt>Held by running calls</dt>
            <dd>{fmtNum(a.credits.held, 2)}</dd>
            <dt>Overage</dt>
            <dd>
              {a.overage_enabled
                ? `${fmtNum(a.credits.overage_used, 2)} used of ${fmtNum(a.credits.overage_ceiling, 2)}`
                : 'off'}
            </dd>
            <dt>Spent</dt>
            <dd>{fmtNum(a.credits.total_spent, 4)}</dd>
            <dt>Period since</dt>
            <dd>{a.period_start?.slice(0, 10)}</dd>
          </dl>
        </Section>
      )}
      {perModel.data && (
        <Section title="Cost per model, last 30 days">
          {perModel.data.groups.length ? (
            <>
              <LineChart testid="cost-chart" time xLabel="day" {...daySeries(perModel.data, 'cost')} />
              <LineChart testid="tokens-chart" time xLabel="day" {...daySeries(perModel.data, 'tokens')} />
            </>
          ) : (
            <div class="muted">No billed calls in the last 30 days.</div>
          )}
        </Section>
      )}
      {perKey.data && (
        <Section title="Cost per key, last 30 days">
          {perKey.data.groups.length ? (
            <>
              <LineChart testid="key-cost-chart" time xLabel="day" {...daySeries(perKey.data, 'cost')} />
              <LineChart testid="key-tokens-chart" time xLabel="day" {...daySeries(perKey.data, 'tokens')} />
              <Table
                testid="key-usage"
                head={['Key', 'Requests', 'Tokens', 'Cost']}
                rows={perKey.data.groups}
                rowKey={(g: any) => g.id}
                cells={(g: any) => [g.name, g.requests, g.tokens, fmtMoney(g.cost)]}
              />
            </>
          ) : (
            <div class="muted">No billed calls in the last 30 days.</div>
          )}
        </Section>
      )}
      {limits.data && (
        <Section title="Rate limits in force">
          <Table
            testid="rate-limits"
            head={['Family', 'Endpoints', 'Counted per', 'Limit', 'Window', 'Remaining', 'Resets in']}
            rows={limits.data.limits}
            rowKey={(l: any) => `${l.family}:${l.scope}`}
            rowAttrs={(l: any) => ({ 'data-family': l.family })}
            cells={(l: any) => [
              l.family,
              l.endpoints.join(', '),
              l.scope,
              l.limit.toLocaleString(),
              `${l.window_s} s`,
              l.remaining.toLocaleString(),
              l.reset_s === null ? '—' : `${l.reset_s} s`,
            ]}
          />
        </Section>
      )}
      {keys.data && (
        <Section title="Per key, all time">
          <Table
            head={['Key', 'Requests', 'Tokens', 'Cost']}
            rows={keys.data.keys}
            rowKey={(k: any) => k.id}
            cells={(k: any) => [
    `${k.name} (…${k.api_key_last_digits})`,
    k.request_count,
    k.usage_tokens,
    fmtMoney(k.usage_cost),
  ]}
          />
        </Section>
      )}
    </>
  );
}
