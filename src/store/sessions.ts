// Dashboard sessions, keyed by the sha256 of the cookie token.
import type { Kv } from './db.ts';
import type { SessionRecord } from './types.ts';

export function makeSessionsRepo(h: Kv) {
  return {
    get: (id: string): Promise<SessionRecord | undefined> => h.get('sessions', id),
    /** inside a transaction */
    put: (s: SessionRecord): void => { h.put('sessions', s.id, s); },
    /** inside a transaction */
    remove: (id: string): void => { h.remove('sessions', id); },
  };
}
export type SessionsRepo = ReturnType<typeof makeSessionsRepo>;
