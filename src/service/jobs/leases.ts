// Per-job ownership on both stores. A process that starts a job writes a lease (src/store/leases.ts:
// owner = this process, unique per start; expires_at) in the same store transaction that moves the
// job to its running state, renews every lease it holds every ttl/3, and removes it when the job ends
// or the process shuts down cleanly. Every process runs a supervisor: every ttl/2 it looks at the
// in-flight jobs of each kind and takes over only those whose lease expired (or is missing, or names
// a process on this machine that no longer exists), applying that kind's restart rule in one store
// transaction that re-reads the lease first (two supervisors never both take a job over).
//
// A process that cannot renew in time (paused, or cut off from the store past its expiry) has lost its
// leases: it is told (`onLost`) and must stop the job and write nothing more about it.
import { randomBytes } from 'node:crypto';
import { readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import type { LeaseKind, LeaseRecord, Store, Tx } from '../../store/index.ts';
import type { Logger } from '../index.ts';

/** default lease lifetime (LOOM_JOB_LEASE_S): the longest a job waits after its process died elsewhere */
export const DEFAULT_LEASE_TTL_MS = 30_000;

/** one kind's supervision: which jobs are in flight, and the restart rule applied when one is orphaned */
export interface Supervised {
  /** ids of the jobs of this kind that are in flight in the store (running, or whatever the kind holds) */
  inFlight(): Promise<string[]>;
  /**
   * inside the takeover transaction (the orphaned lease already removed): re-check the job and apply
   * the restart rule; returns whether anything was taken over, or 'adopt' when this process runs or
   * holds the job from now on (its lease is written in the same transaction)
   */
  takeOver(t: Tx, id: string): Promise<boolean | 'adopt'>;
  /** after the takeover committed (re-queue locally, enqueue, start) */
  after?(id: string): void;
  /** an adopted job's lease was lost later (as for claim()) */
  onLost?(id: string): void;
}

function pidNamespace(): string {
  try { return readlinkSync('/proc/self/ns/pid'); } catch { return 'none'; }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function createLeases(deps: { store: Store; ttlMs?: number; log?: Logger }) {
  const { store, log } = deps;
  const ttlMs = Math.max(1000, deps.ttlMs ?? DEFAULT_LEASE_TTL_MS);
  const me = {
    owner: `${hostname()}/${process.pid}/${randomBytes(6).toString('hex')}`,
    host: hostname(), pidns: pidNamespace(), pid: process.pid,
  };
  const held = new Map<string, { kind: LeaseKind; id: string; expires: number; onLost: () => void }>();
  const kinds = new Map<LeaseKind, Supervised>();
  const keyOf = (kind: LeaseKind, id: string) => `${kind}|${id}`;
  let renewTimer: NodeJS.Timeout | null = null;
  let sweepTimer: NodeJS.Timeout | null = null;
  let sweeping: Promise<void> | null = null;
  let closed = false;

  const record = (kind: LeaseKind, id: string, expires: number): LeaseRecord =>
    ({ kind, id, ...me, expires_at: expires });

  /** an expired lease: none, past its time, or its owner is a process of this machine that is gone */
  function orphaned(l: LeaseRecord | undefined, now: number): boolean {
    if (!l) return true;
    if (l.owner === me.owner) return false;
    if (l.expires_at <= now) return true;
    return l.host === me.host && l.pidns === me.pidns && !alive(l.pid);
  }

  function lose(k: string): void {
    const h = held.get(k);
    if (!h) return;
    held.delete(k);
    log?.warn({ kind: h.kind, id: h.id }, 'job lease lost (not renewed in time): the job is stopped here');
    try { h.onLost(); } catch { /* the job's own handler */ }
  }

  async function renew(): Promise<void> {
    if (!held.size) return;
    const expires = Date.now() + ttlMs;
    const mine = [...held.entries()];
    try {
      const lost = await store.tx(async (t) => {
        const out: string[] = [];
        for (const [k, h] of mine) {
          const cur = await t.leases.get(h.kind, h.id);
          if (cur?.owner !== me.owner) { out.push(k); continue; }
          t.leases.put(record(h.kind, h.id, expires));
        }
        return out;
      });
      for (const [k, h] of mine) if (held.get(k) === h) h.expires = expires;
      for (const k of lost) lose(k);
    } catch (err) {
      log?.warn({ err: String(err) }, 'job leases not renewed');
      // past its expiry a lease may be taken over elsewhere: stop those jobs here
      const now = Date.now();
      for (const [k, h] of mine) if (h.expires <= now) lose(k);
    }
  }

  async function sweepKind(kind: LeaseKind, s: Supervised): Promise<void> {
    const ids = await s.inFlight();
    if (!ids.length) return;
    const leases = new Map((await store.leases.listByKind(kind)).map((l) => [l.id, l]));
    const now = Date.now();
    for (const id of ids) {
      if (held.has(keyOf(kind, id)) || !orphaned(leases.get(id), now)) continue;
      const expires = Date.now() + ttlMs;
      const took = await store.tx(async (t) => {
        const cur = await t.leases.get(kind, id);
        if (!orphaned(cur, Date.now())) return false;
        if (cur) t.leases.remove(kind, id);
        const ok = await s.takeOver(t, id);
        if (ok === 'adopt') t.leases.put(record(kind, id, expires));
        return ok;
      });
      if (took === 'adopt') held.set(keyOf(kind, id), { kind, id, expires, onLost: () => s.onLost?.(id) });
      if (took) {
        log?.info({ kind, id, previous_owner: leases.get(id)?.owner ?? null }, 'orphaned job taken over');
        s.after?.(id);
      }
    }
  }

  /** one pass over every supervised kind (also run at start, before the process serves) */
  function sweep(only?: LeaseKind): Promise<void> {
    if (sweeping) return sweeping.then(() => sweep(only));
    sweeping = (async () => {
      for (const [kind, s] of kinds) {
        if (closed || (only && kind !== only)) continue;
        try {
          await sweepKind(kind, s);
        } catch (err) {
          log?.warn({ kind, err: String(err) }, 'job supervisor pass failed');
        }
      }
    })().finally(() => { sweeping = null; });
    return sweeping;
  }

  return {
    owner: me.owner,
    ttlMs,

    /**
     * Claim a job: `fn` runs inside one store transaction and returns a value when the job moves to
     * its running state there (null/undefined: not claimed); the lease is written in that same
     * transaction. `onLost` is called if the lease is lost later.
     */
    async claim<T>(
      kind: LeaseKind, id: string, fn: (t: Tx) => Promise<T | null | undefined>, onLost: () => void,
    ): Promise<T | null> {
      if (closed) return null;
      const expires = Date.now() + ttlMs;
      const out = await store.tx(async (t) => {
        const v = await fn(t);
        if (v === null || v === undefined) return null;
        t.leases.put(record(kind, id, expires));
        return v;
      });
      if (out !== null) held.set(keyOf(kind, id), { kind, id, expires, onLost });
      return out;
    },

    /** does this process hold the job's lease? (false once lost) */
    holds: (kind: LeaseKind, id: string): boolean => held.has(keyOf(kind, id)),

    /** inside a transaction that ends the job: drop its lease with it (call `forget` after the commit) */
    releaseIn(t: Tx, kind: LeaseKind, id: string): void { if (held.has(keyOf(kind, id))) t.leases.remove(kind, id); },
    forget(kind: LeaseKind, id: string): void { held.delete(keyOf(kind, id)); },

    /** the job ended here: remove its lease (if still ours) */
    async release(kind: LeaseKind, id: string): Promise<void> {
      const k = keyOf(kind, id);
      if (!held.has(k)) return;
      held.delete(k);
      await store.tx(async (t) => {
        if ((await t.leases.get(kind, id))?.owner === me.owner) t.leases.remove(kind, id);
      }).catch((err) => log?.warn({ kind, id, err: String(err) }, 'job lease not released (it expires by itself)'));
    },

    /** supervise a kind (its orphaned jobs are taken over by `s.takeOver`) */
    supervise(kind: LeaseKind, s: Supervised): void { kinds.set(kind, s); },

    sweep,

    /** start renewing and supervising (after every kind is registered and the start-up sweep ran) */
    start(): void {
      if (closed || renewTimer) return;
      renewTimer = setInterval(() => { void renew(); }, Math.max(250, Math.floor(ttlMs / 3)));
      sweepTimer = setInterval(() => { void sweep(); }, Math.max(250, Math.floor(ttlMs / 2)));
      renewTimer.unref();
      sweepTimer.unref();
    },

    /** clean shutdown (after the jobs stopped): every lease still held is removed at once */
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      if (renewTimer) clearInterval(renewTimer);
      if (sweepTimer) clearInterval(sweepTimer);
      await sweeping?.catch(() => {});
      const mine = [...held.values()];
      held.clear();
      if (!mine.length) return;
      await store.tx(async (t) => {
        for (const h of mine) if ((await t.leases.get(h.kind, h.id))?.owner === me.owner) t.leases.remove(h.kind, h.id);
      }).catch((err) => log?.warn({ err: String(err) }, 'job leases not released at shutdown (they expire)'));
    },
  };
}
export type Leases = ReturnType<typeof createLeases>;
