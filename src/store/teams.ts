// Teams: the billing and rate-limit scope of keys.
import { bumpAuthGeneration, type Db } from './db.ts';
import type { TeamRecord } from './types.ts';

export function makeTeamsRepo(db: Db) {
  const { teams } = db.dbs;
  return {
    get: (id: string): TeamRecord | undefined => teams.get(id),
    /** inside a transaction */
    put: (t: TeamRecord): void => { teams.put(t.id, t); bumpAuthGeneration(db); },
    list: (): TeamRecord[] => [...teams.getRange()].map((e) => e.value as TeamRecord),
  };
}
export type TeamsRepo = ReturnType<typeof makeTeamsRepo>;
