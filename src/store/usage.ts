// Usage records: one per billed call, written in the same transaction as the debit.
import { allRecords, ikey, type Kv, scanRecords } from './db.ts';
import type { UsageRecord } from './types.ts';

export function makeUsageRepo(h: Kv) {
  const indexRec = (u: UsageRecord) => {
    const ts = Date.parse(u.created_at);
    h.put('idx', ikey('usage_team', u.team_id, ts, u.id), null);
    if (u.key_id) h.put('idx', ikey('usage_key', u.key_id, ts, u.id), null);
  };
  return {
    get: (id: string): Promise<UsageRecord | undefined> => h.get('usage', id),
    /** inside a transaction */
    put(u: UsageRecord): void { h.put('usage', u.id, u); indexRec(u); },
    listByTeam(teamId: string, opts: { since?: number; until?: number } = {}): Promise<UsageRecord[]> {
      return scanRecords(h, 'usage', ['usage_team', teamId], {
        from: opts.since !== undefined ? [opts.since] : undefined, to: opts.until !== undefined ? [opts.until] : undefined,
      });
    },
    listByKey: (keyId: string): Promise<UsageRecord[]> => scanRecords(h, 'usage', ['usage_key', keyId]),
    async reindex(): Promise<void> { for (const u of await allRecords<UsageRecord>(h, 'usage')) indexRec(u); },
  };
}
export type UsageRepo = ReturnType<typeof makeUsageRepo>;
