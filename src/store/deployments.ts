// Deployments of training jobs to projects; history per project, most recent first.
import { type Db, ikey, scanIndex } from './db.ts';
import type { DeploymentRecord } from './types.ts';

export function makeDeploymentsRepo(db: Db) {
  const { deployments, idx } = db.dbs;
  const keyOf = (d: DeploymentRecord) => ikey('dep_proj', d.project_id, Date.parse(d.created_at), d.deployment_id);
  return {
    get: (id: string): DeploymentRecord | undefined => deployments.get(id),
    /** inside a transaction */
    put(d: DeploymentRecord): void { deployments.put(d.deployment_id, d); idx.put(keyOf(d), null); },
    listByProject(projectId: string): DeploymentRecord[] {
      return [...scanIndex(db, ['dep_proj', projectId])].map((id) => deployments.get(id)).filter(Boolean);
    },
    /** inside a transaction: drop a project's whole history */
    removeByProject(projectId: string): void {
      for (const d of this.listByProject(projectId)) { idx.remove(keyOf(d)); deployments.remove(d.deployment_id); }
    },
    reindex(): void { for (const { value } of deployments.getRange()) idx.put(keyOf(value as DeploymentRecord), null); },
  };
}
export type DeploymentsRepo = ReturnType<typeof makeDeploymentsRepo>;
