// Projects: unique name per team, listed in creation order.
import { type Db, ikey, keyFits, scanIndex } from './db.ts';
import type { ProjectRecord } from './types.ts';

export function makeProjectsRepo(db: Db) {
  const { projects, idx } = db.dbs;
  const keysOf = (p: ProjectRecord) => [ikey('proj_team', p.team_id, Date.parse(p.created_at), p.id), ikey('proj_name', p.team_id, p.name)];
  return {
    get: (id: string): ProjectRecord | undefined => projects.get(id),
    /** whether the name index can hold `name` (it is URI-encoded: 3 bytes per UTF-8 byte outside ASCII) */
    nameFits: (teamId: string, name: string): boolean => keyFits(ikey('proj_name', teamId, name)),
    byName(teamId: string, name: string): ProjectRecord | undefined {
      const id = idx.get(ikey('proj_name', teamId, name));
      return id ? projects.get(id) : undefined;
    },
    /** inside a transaction */
    put(p: ProjectRecord): void {
      projects.put(p.id, p);
      const [a, b] = keysOf(p);
      idx.put(a, null); idx.put(b, p.id);
    },
    /** inside a transaction */
    remove(id: string): void {
      const p = projects.get(id) as ProjectRecord | undefined;
      if (!p) return;
      for (const k of keysOf(p)) idx.remove(k);
      projects.remove(id);
    },
    listByTeam(teamId: string): ProjectRecord[] {
      return [...scanIndex(db, ['proj_team', teamId], { reverse: false })].map((id) => projects.get(id)).filter(Boolean);
    },
    reindex(): void {
      for (const { value } of projects.getRange()) {
        const p = value as ProjectRecord;
        const [a, b] = keysOf(p);
        idx.put(a, null); idx.put(b, p.id);
      }
    },
  };
}
export type ProjectsRepo = ReturnType<typeof makeProjectsRepo>;
