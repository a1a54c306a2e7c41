// Usage records: one per billed call, written in the same transaction as the debit.
import { type Db, ikey, scanIndex } from './db.ts';
import type { UsageRecord } from './types.ts';

export function makeUsageRepo(db: Db) {
  const { usage, idx } = db.dbs;
  const indexRec = (u: UsageRecord) => {
    const ts = Date.parse(u.created_at);
    idx.put(ikey('usage_team', u.team_id, ts, u.id), null);
    if (u.key_id) idx.put(ikey('usage_key', u.key_id, ts, u.id), null);
  };
  return {
    get: (id: string): UsageRecord | undefined => usage.get(id),
    put(u: UsageRecord): void { usage.put(u.id, u); indexRec(u); },
    listByTeam(teamId: string, opts: { since?: number; until?: number } = {}): UsageRecord[] {
      return [...scanIndex(db, ['usage_team', teamId], { from: opts.since !== undefined ? [opts.since] : undefined, to: opts.until !== undefined ? [opts.until] : undefined })]
        .map((id) => usage.get(id)).filter(Boolean);
    },
    listByKey(keyId: string): UsageRecord[] {
      return [...scanIndex(db, ['usage_key', keyId])].map((id) => usage.get(id)).filter(Boolean);
    },
    reindex(): void { for (const { value } of usage.getRange()) indexRec(value as UsageRecord); },
  };
}
export type UsageRepo = ReturnType<typeof makeUsageRepo>;
