// Projects: unique name per team, listed in creation order.
import { allRecords, ikey, keyFits, type Kv, scanRecords } from './db.ts';
import type { ProjectRecord } from './types.ts';

export function makeProjectsRepo(h: Kv) {
  const keysOf = (p: ProjectRecord) => [ikey('proj_team', p.team_id, Date.parse(p.created_at), p.id), ikey('proj_name', p.team_id, p.name)];
  const index = (p: ProjectRecord) => {
    const [a, b] = keysOf(p);
    h.put('idx', a, null); h.put('idx', b, p.id);
  };
  return {
    get: (id: string): Promise<ProjectRecord | undefined> => h.get('projects', id),
    /** whether the name index can hold `name` (it is URI-encoded: 3 bytes per UTF-8 byte outside ASCII) */
    nameFits: (teamId: string, name: string): boolean => keyFits(ikey('proj_name', teamId, name)),
    async byName(teamId: string, name: string): Promise<ProjectRecord | undefined> {
      const id = await h.get('idx', ikey('proj_name', teamId, name));
      return id ? h.get('projects', id) : undefined;
    },
    /** inside a transaction */
    put(p: ProjectRecord): void {
      h.put('projects', p.id, p);
      index(p);
    },
    /** inside a transaction */
    async remove(id: string): Promise<void> {
      const p = (await h.get('projects', id)) as ProjectRecord | undefined;
      if (!p) return;
      for (const k of keysOf(p)) h.remove('idx', k);
      h.remove('projects', id);
    },
    listByTeam: (teamId: string): Promise<ProjectRecord[]> => scanRecords(h, 'projects', ['proj_team', teamId], { reverse: false }),
    all: (): Promise<ProjectRecord[]> => allRecords(h, 'projects'),
    async reindex(): Promise<void> { for (const p of await allRecords<ProjectRecord>(h, 'projects')) index(p); },
  };
}
export type ProjectsRepo = ReturnType<typeof makeProjectsRepo>;
