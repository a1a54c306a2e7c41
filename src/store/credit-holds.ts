// Credit holds shared by processes (a store that several API processes share: PostgreSQL): the
// estimated cost of each billed call in progress, held against its team's balance until the call
// is debited (src/service/billing.ts). Entries of `idx` (`credit-hold|<team>|<id>`) whose value is
// the hold, so a team's holds are one range read and no table is added. A hold that outlives
// `expires_at` (its process died) no longer counts and is removed by the next reserve that sees it.
import { type Kv, ikey, KEY_END } from './db.ts';

export interface CreditHold {
  id: string;
  team_id: string;
  micro: number;
  /** epoch ms after which it no longer counts */
  expires_at: number;
}

const PREFIX = 'credit-hold';

export function makeCreditHoldsRepo(h: Kv) {
  return {
    async listByTeam(teamId: string): Promise<CreditHold[]> {
      const lo = ikey(PREFIX, teamId, '');
      return (await h.range('idx', { gte: lo, lt: lo + KEY_END })).map((e) => e.value as CreditHold);
    },
    /** inside a transaction */
    put(c: CreditHold): void { h.put('idx', ikey(PREFIX, c.team_id, c.id), c); },
    /** inside a transaction */
    remove(teamId: string, id: string): void { h.remove('idx', ikey(PREFIX, teamId, id)); },
  };
}
export type CreditHoldsRepo = ReturnType<typeof makeCreditHoldsRepo>;
