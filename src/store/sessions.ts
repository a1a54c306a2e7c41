// Dashboard sessions, keyed by the sha256 of the cookie token.
import type { Db } from './db.ts';
import type { SessionRecord } from './types.ts';

export function makeSessionsRepo(db: Db) {
  const { sessions } = db.dbs;
  return {
    get: (id: string): SessionRecord | undefined => sessions.get(id),
    put: (s: SessionRecord): void => { sessions.put(s.id, s); },
    remove: (id: string): void => { sessions.remove(id); },
  };
}
export type SessionsRepo = ReturnType<typeof makeSessionsRepo>;
