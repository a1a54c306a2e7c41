// Usage and billing: the plan and credit balance (GET /account), usage and cost over time per model
// (from the inference history) and per key (GET /list-api-keys), and the rate limit in force (the
// X-RateLimit-* headers the server sends).
import { api } from '../api.ts';
import { LineChart } from '../chart.tsx';
import { ErrorBox, Loading, Section, fmtMoney, fmtNum, useResource } from '../ui.tsx';

const DAY = 86_400_000;

/** cost and tokens per day and model over the last `days` days of history */
export function perDay(rows: any[], days: number) {
  const end = Math.floor(Date.now() / DAY) * DAY + DAY;
  const xs = Array.from({ length: days }, (_, i) => end - (days - i) * DAY);
  const models = [...new Set(rows.map((r) => r.model_id as string))].sort();
  const cost = models.map(() => xs.map(() => 0));
  const tokens = models.map(() => xs.map(() => 0));
  for (const r of rows) {
    const i = Math.floor((Date.parse(r.created_at) - xs[0]) / DAY);
    if (i < 0 || i >= days) continue;
    const m = models.indexOf(r.model_id);
    cost[m][i] += r.cost ?? 0;
    tokens[m][i] += r.usage?.total_tokens ?? 0;
  }
  return { x: xs.map((t) => t / 1000), models, cost, tokens };
}

export function UsagePage() {
  const acct = useResource(async () => {
    const r = await fetch('/account', { credentials: 'same-origin' });
    const body = await r.json();
    if (!r.ok) throw new Error(body.detail ?? `HTTP ${r.status}`);
    const h = (n: string) => r.headers.get(n);
    return {
      ...body,
      rate: {
        limit: h('X-RateLimit-Limit'),
        remaining: h('X-RateLimit-Remaining'),
        reset: h('X-RateLimit-Reset'),
        scope: h('X-RateLimit-Scope'),
      },
    };
  });
  const keys = useResource(() => api('GET', '/list-api-keys'));
  const hist = useResource(() =>
    api('GET', '/inferences', { query: { limit: 1000, since: new Date(Date.now() - 30 * DAY).toISOString() } }),
  );
  const a = acct.data;
  const days = hist.data ? perDay(hist.data.inferences, 30) : null;
  return (
    <>
      <h1>Usage &amp; billing</h1>
      <ErrorBox error={acct.error ?? keys.error ?? hist.error} />
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
            <dt>Rate limit (this dashboard's requests)</dt>
            <dd>
              {a.rate.limit
                ? `${a.rate.remaining} of ${a.rate.limit} left, resets in ${a.rate.reset} s (${a.rate.scope} scope)`
                : '—'}
            </dd>
          </dl>
        </Section>
      )}
      {days && (
        <Section title="Cost per model, last 30 days">
          {days.models.length ? (
            <>
              <LineChart
                testid="cost-chart"
                time
                x={days.x}
                xLabel="day"
                series={days.models.map((m, i) => ({ label: m, values: days.cost[i] }))}
              />
              <LineChart
                testid="tokens-chart"
                time
                x={days.x}
                xLabel="day"
                series={days.models.map((m, i) => ({ label: `${m} tokens`, values: days.tokens[i] }))}
              />
            </>
          ) : (
            <div class="muted">No inferences in the last 30 days.</div>
          )}
        </Section>
      )}
      {keys.data && (
        <Section title="Per key">
          <table>
            <thead>
              <tr>
                <th>Key</th>
                <th>Requests</th>
                <th>Tokens</th>
                <th>Cost</th>
              </tr>
            </thead>
            <tbody>
              {keys.data.keys.map((k: any) => (
                <tr key={k.id}>
                  <td>
                    {k.name} (…{k.api_key_last_digits})
                  </td>
                  <td>{k.request_count}</td>
                  <td>{k.usage_tokens}</td>
                  <td>{fmtMoney(k.usage_cost)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Section>
      )}
    </>
  );
}
