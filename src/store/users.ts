// Users (dashboard accounts) with a unique email index.
import { type Db, ikey } from './db.ts';
import type { UserRecord } from './types.ts';

export function makeUsersRepo(db: Db) {
  const { users, idx } = db.dbs;
  return {
    get: (id: string): UserRecord | undefined => users.get(id),
    byEmail(email: string): UserRecord | undefined {
      const id = idx.get(ikey('user_email', email.toLowerCase()));
      return id ? users.get(id) : undefined;
    },
    /** whether any user exists */
    any(): boolean {
      for (const _ of users.getKeys({ limit: 1 })) return true;
      return false;
    },
    /** inside a transaction */
    put(u: UserRecord): void {
      users.put(u.id, u);
      idx.put(ikey('user_email', u.email.toLowerCase()), u.id);
    },
    reindex(): void {
      for (const { value } of users.getRange()) idx.put(ikey('user_email', (value as UserRecord).email.toLowerCase()), (value as UserRecord).id);
    },
  };
}
export type UsersRepo = ReturnType<typeof makeUsersRepo>;
