// Teams: the billing and rate-limit scope of keys.
import { allRecords, bumpAuthGeneration, type Kv } from './db.ts';
import type { TeamRecord } from './types.ts';

export function makeTeamsRepo(h: Kv) {
  return {
    get: (id: string): Promise<TeamRecord | undefined> => h.get('teams', id),
    /** inside a transaction */
    put(t: TeamRecord): void {
      h.put('teams', t.id, t);
      bumpAuthGeneration(h);
    },
    list: (): Promise<TeamRecord[]> => allRecords(h, 'teams'),
  };
}
export type TeamsRepo = ReturnType<typeof makeTeamsRepo>;
