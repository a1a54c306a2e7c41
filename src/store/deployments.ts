// Deployments of training jobs to projects; history per project, most recent first.
import { allRecords, ikey, type Kv, scanRecords } from './db.ts';
import type { DeploymentRecord } from './types.ts';

export function makeDeploymentsRepo(h: Kv) {
  const keyOf = (d: DeploymentRecord) => ikey('dep_proj', d.project_id, Date.parse(d.created_at), d.deployment_id);
  const repo = {
    get: (id: string): Promise<DeploymentRecord | undefined> => h.get('deployments', id),
    /** inside a transaction */
    put(d: DeploymentRecord): void { h.put('deployments', d.deployment_id, d); h.put('idx', keyOf(d), null); },
    listByProject: (projectId: string): Promise<DeploymentRecord[]> => scanRecords(h, 'deployments', ['dep_proj', projectId]),
    all: (): Promise<DeploymentRecord[]> => allRecords(h, 'deployments'),
    /** inside a transaction: drop a project's whole history */
    async removeByProject(projectId: string): Promise<void> {
      for (const d of await repo.listByProject(projectId)) { h.remove('idx', keyOf(d)); h.remove('deployments', d.deployment_id); }
    },
    async reindex(): Promise<void> {
      for (const d of await allRecords<DeploymentRecord>(h, 'deployments')) h.put('idx', keyOf(d), null);
    },
  };
  return repo;
}
export type DeploymentsRepo = ReturnType<typeof makeDeploymentsRepo>;
