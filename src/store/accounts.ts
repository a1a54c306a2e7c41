// Billing accounts, one per team: plan, balances (integer micro-credits), billing month.
import type { Kv } from './db.ts';
import type { BillingAccount } from './types.ts';

export function makeAccountsRepo(h: Kv) {
  return {
    get: (teamId: string): Promise<BillingAccount | undefined> => h.get('accounts', teamId),
    /** inside a transaction */
    put: (a: BillingAccount): void => { h.put('accounts', a.team_id, a); },
  };
}
export type AccountsRepo = ReturnType<typeof makeAccountsRepo>;
