// Billing accounts, one per team: plan, balances (integer micro-credits), billing month.
import type { Db } from './db.ts';
import type { BillingAccount } from './types.ts';

export function makeAccountsRepo(db: Db) {
  const { accounts } = db.dbs;
  return {
    get: (teamId: string): BillingAccount | undefined => accounts.get(teamId),
    put: (a: BillingAccount): void => { accounts.put(a.team_id, a); },
  };
}
export type AccountsRepo = ReturnType<typeof makeAccountsRepo>;
