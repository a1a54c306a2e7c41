// Users (dashboard accounts) with a unique email index.
import { allRecords, ikey, type Kv } from './db.ts';
import type { UserRecord } from './types.ts';

export function makeUsersRepo(h: Kv) {
  const emailKey = (u: UserRecord) => ikey('user_email', u.email.toLowerCase());
  return {
    get: (id: string): Promise<UserRecord | undefined> => h.get('users', id),
    async byEmail(email: string): Promise<UserRecord | undefined> {
      const id = await h.get('idx', ikey('user_email', email.toLowerCase()));
      return id ? h.get('users', id) : undefined;
    },
    /** whether any user exists */
    async any(): Promise<boolean> {
      return (await h.range('users', { limit: 1 })).length > 0;
    },
    /** inside a transaction */
    put(u: UserRecord): void {
      h.put('users', u.id, u);
      h.put('idx', emailKey(u), u.id);
    },
    async reindex(): Promise<void> {
      for (const u of await allRecords<UserRecord>(h, 'users')) h.put('idx', emailKey(u), u.id);
    },
  };
}
export type UsersRepo = ReturnType<typeof makeUsersRepo>;
