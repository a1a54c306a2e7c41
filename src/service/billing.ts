// Credits, plans, prices and usage. 1 credit = 0.01 currency unit; balances are integer
// micro-credits. Every billed call goes through `charge`, which in ONE write transaction rolls the
// billing month if due, draws the cost from the pools in order (free allowance → included →
// paid balance → overage), writes the usage record and bumps the key's usage counters.
//
// Holds: before a call runs, `reserve` holds an upper bound of its cost against the balance, in
// the same synchronous step as the check, so concurrent calls cannot all pass on the same credit;
// `charge` releases the hold once the debit has committed (a failed call releases it without a
// debit). A call is admitted while spendable credit minus the team's holds is positive, so at
// any concurrency the overdraft is at most the cost of one call. While other calls of the team are
// in flight, a call that does not fit waits for them to settle (up to `creditHoldWaitMs`) instead
// of being refused on credit that may turn out unspent. On a store of one process (LMDB) holds live
// in this process's memory only: they exist while a call runs here, so a crash ends them with the
// calls they covered, and no write transaction is spent per call on them. On a store that several
// API processes share (PostgreSQL) each hold is also a store record (store/credit-holds.ts),
// written by a transaction that reads the account and the team's holds of every process, so the
// bound (overdraft at most one call's cost) holds across processes; a hold expires after
// SHARED_HOLD_TTL_MS (its process died, or the call outlived it), and waiting for a release from
// another process is polling (SHARED_HOLD_POLL_MS).
import type { BillingAccount, Store, TokenUsage, Tx, UsageRecord } from '../store/index.ts';
import {
  SESSION_GROUP, USAGE_INTERVALS, type UsageGroupBy, type UsageInterval, usageSeries,
} from './usage/series.ts';
import type { PlanConfig, ServiceConfig } from './config.ts';
import { BillingError, NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso, randomToken } from './ids.ts';
import type { Principal } from './auth.ts';

export const MICRO = 1_000_000;
/** a shared hold stops counting this long after its call began (a process that died never releases it) */
export const SHARED_HOLD_TTL_MS = 10 * 60_000;
/** how soon a call waiting for credit held by other processes checks again (doubling, up to 16x) */
const SHARED_HOLD_POLL_MS = 25;

/** Cache pricing relative to the input price (spec section 8). */
export const CACHING_FAMILIES = {
  /** messages-style (Claude-like): explicit cache_control markers; read 0.1x, write 1.25x */
  explicit: { read: 0.1, write: 1.25, markers: true, automatic: false },
  /** automatic prefix caching, read 0.5x, write at the input rate */
  automatic_half: { read: 0.5, write: 1.0, markers: false, automatic: true },
  /** automatic prefix caching, read 0.1x, write at the input rate */
  automatic_tenth: { read: 0.1, write: 1.0, markers: false, automatic: true },
  /** no prompt caching (encoders) */
  none: { read: 1.0, write: 1.0, markers: false, automatic: false },
} as const;
export type CachingFamily = keyof typeof CACHING_FAMILIES;

/** Price of a model in credits per 1M tokens. */
export interface Pricing { input: number; output: number }

export function completeUsage(u: Partial<TokenUsage>): TokenUsage {
  const prompt_tokens = u.prompt_tokens ?? 0;
  const cache_read_tokens = u.cache_read_tokens ?? 0;
  const cache_write_tokens = u.cache_write_tokens ?? 0;
  const completion_tokens = u.completion_tokens ?? 0;
  return { prompt_tokens, cache_read_tokens, cache_write_tokens, completion_tokens, total_tokens: prompt_tokens + cache_read_tokens + cache_write_tokens + completion_tokens };
}

/** Cost in micro-credits (credits per 1M tokens == micro-credits per token), rounded up. */
export function costMicro(pricing: Pricing, family: CachingFamily, u: TokenUsage): number {
  const f = CACHING_FAMILIES[family] ?? CACHING_FAMILIES.none;
  const c = u.prompt_tokens * pricing.input + u.cache_read_tokens * pricing.input * f.read + u.cache_write_tokens * pricing.input * f.write + u.completion_tokens * pricing.output;
  return Math.ceil(c - 1e-9);
}

const monthStart = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)).toISOString();

/** The estimated cost of a call in progress, held against its team's balance until it settles. */
export interface Hold {
  readonly team_id: string;
  readonly micro: number;
  /** the store record's id where holds are shared by processes, else null */
  readonly shared_id: string | null;
  release(): void;
}

/** Token counts that bound a call's usage before it runs (see `estimateUsage` in inference.ts). */
export function holdMicro(pricing: Pricing, family: CachingFamily, input_tokens: number, output_tokens: number) {
  const f = CACHING_FAMILIES[family] ?? CACHING_FAMILIES.none;
  // a prompt written to the cache costs `write` times the input price
  const u = f.write > 1 ? { cache_write_tokens: input_tokens } : { prompt_tokens: input_tokens };
  return costMicro(pricing, family, completeUsage({ ...u, completion_tokens: output_tokens }));
}

export interface AccountView {
  team_id: string;
  plan: string;
  plan_kind: 'free' | 'paid';
  credits: {
    free_allowance: number; included: number; paid_balance: number; available: number;
    /** held by the team's calls in progress (their estimated cost, until each is debited) */
    held: number;
    overage_used: number; overage_ceiling: number; total_spent: number;
  };
  overage_enabled: boolean;
  card_on_file: boolean;
  period_start: string;
}

export function createBillingService(store: Store, config: ServiceConfig) {
  // A denial's resolution_url: GET /account (plan, credits, card on file), the billing page that exists
  // until the dashboard does; `code` says what to resolve (credits, plan, payment method).
  const url = (_need: 'credits' | 'plan' | 'payment-method') => `${config.publicUrl.replace(/\/$/, '')}/account`;
  const planOf = (a: BillingAccount): PlanConfig => config.plans[a.plan] ?? config.plans[config.defaultPlan];

  /** the account with its billing month rolled forward (paid plans renew included credits) */
  function current(a: BillingAccount, now = new Date()): BillingAccount {
    const ms = monthStart(now);
    if (a.period_start >= ms) return a;
    const plan = planOf(a);
    return { ...a, period_start: ms, overage_micro: 0, included_micro: plan.kind === 'paid' ? plan.credits * MICRO : 0 };
  }

  async function getAccount(teamId: string): Promise<BillingAccount> {
    const a = await store.accounts.get(teamId);
    if (!a) throw new NotFoundError(`No billing account for team ${teamId}`);
    return current(a);
  }

  type Denial = 'card_required' | 'direct_model_requires_credits' | 'credit_ceiling_reached' | 'out_of_credits';
  /** why a call that would spend on top of `held` may not run, or null when it may */
  function denialOf(a: BillingAccount, viaRouter: boolean, held: number): Denial | null {
    const plan = planOf(a);
    if (plan.requires_card && !a.card_on_file) return 'card_required';
    if (!viaRouter && plan.kind === 'free' && a.paid_balance_micro <= 0) return 'direct_model_requires_credits';
    const spendable = a.free_allowance_micro + a.included_micro + a.paid_balance_micro - held;
    if (spendable > 0) return null;
    if (plan.kind === 'paid' && a.overage_enabled) {
      // holds beyond the balance draw on the overage room
      return a.overage_micro - spendable < plan.overage_ceiling * MICRO ? null : 'credit_ceiling_reached';
    }
    return 'out_of_credits';
  }

  /** the billing denial's error (402/403 with code and resolution_url) */
  function denialError(code: Denial, a: BillingAccount, held: number): BillingError {
    const inFlight = held > 0 ? ' (counting credit held by calls in progress)' : '';
    switch (code) {
      case 'card_required':
        return new BillingError(code, `The ${a.plan} plan needs a verified payment method`, url('payment-method'));
      case 'direct_model_requires_credits': {
        const msg = 'Calling a model directly needs a paid credit balance; '
          + 'use the router model service/auto or add credits';
        return new BillingError(code, msg, url('credits'));
      }
      case 'credit_ceiling_reached': {
        const msg = `Maximum monthly overage spend of ${planOf(a).overage_ceiling} credits reached${inFlight}`;
        return new BillingError(code, msg, url('plan'));
      }
      case 'out_of_credits':
        return new BillingError(code, `Out of credits: add credits or upgrade the plan${inFlight}`, url('credits'));
    }
  }

  /**
   * Per team: credit held by its calls in progress, and the calls waiting for some to settle
   * (FIFO). A release wakes the first waiter; a waiter that gets its hold wakes the next, one that
   * still does not fit waits again at the front; when the team's last call settles all wake.
   */
  interface TeamHolds { micro: number; count: number; waiters: Array<() => void> }
  const holds = new Map<string, TeamHolds>();
  const sharedHolds = store.db.kind === 'postgres';
  function hold(teamId: string, micro: number, sharedId: string | null = null): Hold {
    let t = holds.get(teamId);
    if (!t) holds.set(teamId, (t = { micro: 0, count: 0, waiters: [] }));
    t.micro += micro;
    t.count++;
    let released = false;
    return {
      team_id: teamId, micro, shared_id: sharedId,
      release() {
        if (released) return;
        released = true;
        // a call released without a debit: its shared record goes in a transaction of its own (if
        // that fails the record expires; until then it only makes the bound stricter)
        if (sharedId && !charged.delete(sharedId)) {
          store.tx((x) => { x.creditHolds.remove(teamId, sharedId); }, { durable: false }).catch(() => {});
        }
        t.micro -= micro;
        t.count--;
        if (t.count > 0) { t.waiters[0]?.(); return; }
        holds.delete(teamId);
        for (const w of [...t.waiters]) w();
      },
    };
  }
  /** shared holds whose record the debit's transaction removed (release() then has nothing to remove) */
  const charged = new Set<string>();

  /**
   * Shared holds: one transaction reads the account and the team's live holds of every process,
   * and writes this call's hold when it fits. Returns the denial (and what it saw) otherwise.
   */
  async function reserveShared(teamId: string, viaRouter: boolean, micro: number) {
    const id = newId();
    return store.tx(async (x) => {
      const found = await x.accounts.get(teamId);
      if (!found) throw new NotFoundError(`No billing account for team ${teamId}`);
      const a = current(found);
      const now = Date.now();
      let held = 0;
      let live = 0;
      for (const h of await x.creditHolds.listByTeam(teamId)) {
        if (h.expires_at <= now) { x.creditHolds.remove(teamId, h.id); continue; }
        held += h.micro;
        live++;
      }
      const denial = denialOf(a, viaRouter, held);
      if (!denial) x.creditHolds.put({ id, team_id: teamId, micro, expires_at: now + SHARED_HOLD_TTL_MS });
      return { id, a, held, live, denial };
      // a hold lost in a database crash only loosens the bound for the calls then in flight
    }, { durable: false });
  }

  /** the team's live shared holds, micro-credits (committed reads) */
  async function sharedHeld(teamId: string): Promise<number> {
    const now = Date.now();
    const live = (await store.creditHolds.listByTeam(teamId)).filter((h) => h.expires_at > now);
    return live.reduce((n, h) => n + h.micro, 0);
  }

  /** wait at most `ms` for a wake-up from a release */
  function waitRelease(t: TeamHolds, ms: number, front: boolean): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        const i = t.waiters.indexOf(done);
        if (i >= 0) t.waiters.splice(i, 1);
        resolve();
      };
      const timer = setTimeout(done, ms);
      if (front) t.waiters.unshift(done); else t.waiters.push(done);
    });
  }

  function view(a: BillingAccount, held = holds.get(a.team_id)?.micro ?? 0): AccountView {
    const plan = planOf(a);
    return {
      team_id: a.team_id, plan: a.plan, plan_kind: plan.kind,
      credits: {
        free_allowance: a.free_allowance_micro / MICRO, included: a.included_micro / MICRO, paid_balance: a.paid_balance_micro / MICRO,
        available: (a.free_allowance_micro + a.included_micro + a.paid_balance_micro) / MICRO,
        held: held / MICRO,
        overage_used: a.overage_micro / MICRO, overage_ceiling: plan.overage_ceiling, total_spent: a.total_spent_micro / MICRO,
      },
      overage_enabled: a.overage_enabled, card_on_file: a.card_on_file, period_start: a.period_start,
    };
  }

  return {
    view: async (teamId: string) => {
      const a = await getAccount(teamId);
      return sharedHolds ? view(a, await sharedHeld(teamId)) : view(a);
    },

    /** inside a transaction: the account of a new team */
    openAccountTx(t: Tx, teamId: string, planId: string): void {
      const plan = config.plans[planId];
      if (!plan) throw new ValidationError(`Unknown plan ${planId}`, [{ path: '/plan', message: `must be one of ${Object.keys(config.plans).join(', ')}` }]);
      t.accounts.put({
        team_id: teamId, plan: planId,
        free_allowance_micro: plan.kind === 'free' ? plan.credits * MICRO : 0,
        included_micro: plan.kind === 'paid' ? plan.credits * MICRO : 0,
        paid_balance_micro: 0, overage_micro: 0, overage_enabled: plan.kind === 'paid', card_on_file: false,
        period_start: monthStart(new Date()), billing_customer_id: null, total_spent_micro: 0, updated_at: nowIso(),
      });
    },

    /** inside a transaction: create the billing customer on first key creation; true when created */
    async ensureCustomerTx(t: Tx, teamId: string): Promise<boolean> {
      const a = await t.accounts.get(teamId);
      if (!a || a.billing_customer_id) return false;
      t.accounts.put({ ...a, billing_customer_id: 'cus_' + randomToken(12), updated_at: nowIso() });
      return true;
    },

    /**
     * The start of a billed call: checks the plan and the spendable balance less the team's holds,
     * and holds `estimate_micro` (an upper bound of the call's cost) until `charge` or
     * `Hold.release`. Throws the billing denial (402/403 with code and resolution_url).
     * `viaRouter`: the call named the router `service/auto`.
     */
    async reserve(p: Principal, opts: { viaRouter: boolean; estimate_micro: number }): Promise<Hold> {
      const deadline = Date.now() + config.creditHoldWaitMs;
      if (sharedHolds) {
        const micro = Math.max(0, opts.estimate_micro);
        for (let n = 0; ; n++) {
          const r = await reserveShared(p.team_id, opts.viaRouter, micro);
          if (!r.denial) return hold(p.team_id, micro, r.id);
          const left = deadline - Date.now();
          const final = r.denial === 'card_required' || r.denial === 'direct_model_requires_credits';
          if (r.live === 0 || final || left <= 0) {
            throw denialError(r.denial, r.a, r.held);
          }
          // calls in progress (here or in another process) hold credit that may turn out unspent
          const t = holds.get(p.team_id);
          const ms = Math.min(left, SHARED_HOLD_POLL_MS * 2 ** Math.min(n, 4));
          await (t ? waitRelease(t, ms, false) : new Promise((res) => setTimeout(res, ms)));
        }
      }
      for (let woken = false; ; woken = true) {
        const a = await getAccount(p.team_id);
        const t = holds.get(p.team_id);
        const held = t?.micro ?? 0;
        const denial = denialOf(a, opts.viaRouter, held);
        if (!denial) {
          const h = hold(p.team_id, Math.max(0, opts.estimate_micro));
          holds.get(p.team_id)!.waiters[0]?.(); // there may be room for the next one too
          return h;
        }
        // nothing in flight (or waited long enough): the balance itself is spent
        const left = deadline - Date.now();
        if (!t || denial === 'card_required' || denial === 'direct_model_requires_credits' || left <= 0) {
          throw denialError(denial, a, held);
        }
        await waitRelease(t, left, woken);
      }
    },

    /** credit held by calls of the team in progress, micro-credits */
    heldMicro: (teamId: string): number => holds.get(teamId)?.micro ?? 0,

    /**
     * Debit a finished call and write its usage record, atomically. The last pool absorbs a
     * shortfall (overage on paid plans, else the paid balance goes negative by less than one
     * call), so the sum of usage records always equals what was debited. `alsoWrite` runs in the
     * same transaction (the inference record). `hold` (from `reserve`) is released once the debit
     * has committed or failed, so at every moment the credit counts as held or as spent.
     */
    async charge(input: {
      principal: Principal; model_id: string; endpoint: string; inference_id: string | null; usage: TokenUsage;
      pricing: Pricing; caching_family: CachingFamily; alsoWrite?: (t: Tx) => void | Promise<void>; hold?: Hold;
    }): Promise<UsageRecord> {
      const cost = costMicro(input.pricing, input.caching_family, input.usage);
      const p = input.principal;
      try {
        const out = await store.tx(async (tx) => {
          const a = current((await tx.accounts.get(p.team_id))!);
          const plan = planOf(a);
          let left = cost;
          const take = (avail: number) => { const t = Math.max(0, Math.min(avail, left)); left -= t; return t; };
          const free_micro = take(a.free_allowance_micro);
          const included_micro = take(a.included_micro);
          const paid_micro = take(a.paid_balance_micro);
          let overage_micro = 0;
          let paid_extra = 0;
          if (left > 0 && plan.kind === 'paid' && a.overage_enabled) { overage_micro = left; left = 0; }
          if (left > 0) { paid_extra = left; left = 0; }
          const now = nowIso();
          tx.accounts.put({
            ...a,
            free_allowance_micro: a.free_allowance_micro - free_micro,
            included_micro: a.included_micro - included_micro,
            paid_balance_micro: a.paid_balance_micro - paid_micro - paid_extra,
            overage_micro: a.overage_micro + overage_micro,
            total_spent_micro: a.total_spent_micro + cost,
            updated_at: now,
          });
          const rec: UsageRecord = {
            id: newId(), team_id: p.team_id, key_id: p.key_id, user_id: p.user_id, model_id: input.model_id,
            endpoint: input.endpoint, inference_id: input.inference_id, usage: input.usage, cost_micro: cost,
            drawn: { free_micro, included_micro, paid_micro: paid_micro + paid_extra, overage_micro }, created_at: now,
          };
          tx.usage.put(rec);
          if (input.hold?.shared_id) tx.creditHolds.remove(input.hold.team_id, input.hold.shared_id);
          if (p.key_id) await tx.keys.bump(p.key_id, { tokens: input.usage.total_tokens, cost_micro: cost });
          await input.alsoWrite?.(tx);
          return rec;
        });
        const sharedId = input.hold?.shared_id;
        if (sharedId) charged.add(sharedId);
        return out;
      } finally {
        input.hold?.release();
      }
    },

    /** admin: add paid credits */
    async grant(teamId: string, credits: number): Promise<AccountView> {
      if (!Number.isFinite(credits) || credits === 0) throw new ValidationError('credits must be a non-zero number', [{ path: '/credits', message: 'must be a non-zero number' }]);
      await getAccount(teamId);
      await store.tx(async (t) => {
        const a = current((await t.accounts.get(teamId))!);
        t.accounts.put({ ...a, paid_balance_micro: a.paid_balance_micro + Math.round(credits * MICRO), updated_at: nowIso() });
      });
      return view(await getAccount(teamId));
    },

    /** admin: change plan (and card/overage flags). Moving to a paid plan starts its included credits. */
    async setPlan(teamId: string, planId: string, opts: { card_on_file?: boolean; overage_enabled?: boolean } = {}): Promise<AccountView> {
      const plan = config.plans[planId];
      if (!plan) throw new ValidationError(`Unknown plan ${planId}`, [{ path: '/plan', message: `must be one of ${Object.keys(config.plans).join(', ')}` }]);
      await getAccount(teamId);
      await store.tx(async (t) => {
        const a = current((await t.accounts.get(teamId))!);
        const changed = a.plan !== planId;
        t.accounts.put({
          ...a, plan: planId,
          included_micro: changed ? (plan.kind === 'paid' ? plan.credits * MICRO : 0) : a.included_micro,
          overage_enabled: opts.overage_enabled ?? (changed ? plan.kind === 'paid' : a.overage_enabled),
          card_on_file: opts.card_on_file ?? a.card_on_file,
          updated_at: nowIso(),
        });
      });
      return view(await getAccount(teamId));
    },

    usageOf(teamId: string) { return store.usage.listByTeam(teamId); },

    /** GET /usage: requests, tokens and cost per hour or day and per key or model (default: last 30 days / 48 hours) */
    async series(teamId: string, q: { group_by?: UsageGroupBy; interval?: UsageInterval; since?: number; until?: number }) {
      const until = q.until ?? Date.now() + 1;
      const since = q.since ?? until - (q.interval === 'hour' ? 2 : 30) * USAGE_INTERVALS.day;
      const records = since < until ? await store.usage.listByTeam(teamId, { since, until }) : [];
      const keys = new Map((await store.keys.listByTeam(teamId)).map((k) => [k.id, k]));
      const nameOf = (group: string) => {
        if (q.group_by === 'model') return group;
        if (group === SESSION_GROUP) return 'dashboard session';
        const k = keys.get(group);
        if (!k) return group;
        return `${k.name} (…${k.last_digits})${k.revoked_at ? ' revoked' : ''}`;
      };
      const opts = { group_by: q.group_by ?? 'key', interval: q.interval ?? 'day', since, until } as const;
      return usageSeries(records, opts, nameOf);
    },
  };
}
export type BillingService = ReturnType<typeof createBillingService>;
