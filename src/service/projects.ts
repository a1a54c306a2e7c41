// Projects and deployments. A deployment of a `complete` training job starts `deploying` while the
// runtime warms the model; when ready, ONE transaction makes it `active`, marks the previous active
// deployment `inactive` and the job `deployed`. The old deployment keeps serving until then.
import type { DeploymentRecord, ProjectRecord, Store, TrainingJobRecord } from '../store/index.ts';
import { policyOf } from './adaptive/policy.ts';
import type { Principal } from './auth.ts';
import { ConflictError, NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';
import type { InferenceService } from './inference.ts';
import { type ArtifactStore, localModelRef } from './artifacts/types.ts';
import { type GenerateMessage, type ModelRef, type ModelRuntime, jobModelRef } from './runtime.ts';

const projectView = (p: ProjectRecord) => ({
  id: p.id, name: p.name, created_at: p.created_at, active_deployment_id: p.active_deployment_id,
  adaptive: policyOf(p.adaptive),
});
const deploymentView = (d: DeploymentRecord) => ({
  deployment_id: d.deployment_id, status: d.status, training_job_id: d.training_job_id, project_id: d.project_id,
  created_at: d.created_at, activated_at: d.activated_at, replaced_at: d.replaced_at, error: d.error,
  ...(d.adaptive ? { adaptive: d.adaptive } : {}),
});

export function createProjectsService(deps: {
  store: Store; runtime: ModelRuntime; inference: InferenceService; log?: { warn(o: object, m: string): void };
  /** a deployed model's weights on an S3 artifact store are fetched to this node before it warms */
  artifacts?: ArtifactStore;
}) {
  const { store, runtime, artifacts } = deps;
  const pending = new Set<Promise<void>>();

  const refOf = (job: TrainingJobRecord): ModelRef => localModelRef(artifacts, jobModelRef(job));
  /** fetch the weights (S3 artifact store), then load them */
  const warmJob = async (job: TrainingJobRecord): Promise<void> => {
    const dir = jobModelRef(job).dir;
    if (artifacts && dir) await artifacts.getDir(dir);
    await runtime.warm(refOf(job));
  };

  async function own(p: Principal, id: string): Promise<ProjectRecord> {
    const pr = await store.projects.get(id);
    if (!pr || pr.team_id !== p.team_id) throw new NotFoundError(`Project ${id} not found`);
    return pr;
  }

  /** one transaction: this deployment active, the previous one inactive, the job deployed */
  async function activate(depId: string): Promise<void> {
    await store.tx(async (t) => {
      const d = await t.deployments.get(depId);
      if (!d || d.status !== 'deploying') return;
      const pr = await t.projects.get(d.project_id);
      if (!pr) return; // project deleted meanwhile
      const now = nowIso();
      if (pr.active_deployment_id && pr.active_deployment_id !== depId) {
        const old = await t.deployments.get(pr.active_deployment_id);
        if (old) t.deployments.put({ ...old, status: 'inactive', replaced_at: now });
      }
      t.deployments.put({ ...d, status: 'active', activated_at: now });
      t.projects.put({ ...pr, active_deployment_id: depId });
      const job = await t.trainingJobs.get(d.training_job_id);
      if (job && job.status === 'complete') t.trainingJobs.put({ ...job, status: 'deployed', updated_at: now });
    });
  }

  async function failDeployment(depId: string, err: unknown): Promise<void> {
    await store.tx(async (t) => {
      const d = await t.deployments.get(depId);
      if (d && d.status === 'deploying') t.deployments.put({ ...d, status: 'failed', error: err instanceof Error ? err.message : String(err) });
    });
  }

  return {
    async list(p: Principal) { return { projects: (await store.projects.listByTeam(p.team_id)).map(projectView) }; },

    async create(p: Principal, name: string) {
      const trimmed = name.trim();
      if (!trimmed) throw new ValidationError('name must not be empty', [{ path: '/name', message: 'must not be empty' }]);
      if (!store.projects.nameFits(p.team_id, trimmed)) {
        const message = 'is too long to index: at most about 600 bytes of UTF-8 (200 characters outside emoji)';
        throw new ValidationError(`name ${message}`, [{ path: '/name', message, keyword: 'maxLength' }]);
      }
      const pr: ProjectRecord = { id: newId(), team_id: p.team_id, name: trimmed, active_deployment_id: null, created_at: nowIso() };
      const ok = await store.tx(async (t) => {
        if (await t.projects.byName(p.team_id, trimmed)) return false;
        t.projects.put(pr);
        return true;
      });
      if (!ok) throw new ConflictError(`A project named ${trimmed} already exists`);
      return { id: pr.id, name: pr.name, created_at: pr.created_at };
    },

    async get(p: Principal, id: string) { return projectView(await own(p, id)); },

    /** removes the project, its deployment history and its inference endpoint at once */
    async remove(p: Principal, id: string): Promise<void> {
      const pr = await own(p, id);
      const jobOf = async (depId: string | null | undefined) =>
        (depId ? (await store.deployments.get(depId))?.training_job_id : undefined);
      const deployed = await jobOf(pr.active_deployment_id);
      await store.tx(async (t) => {
        await t.deployments.removeByProject(id);
        // its adaptive runs go with it (a retraining job already created stays, an ordinary job)
        for (const r of await t.adaptiveRuns.listByProject(id)) await t.adaptiveRuns.remove(r.id);
        await t.projects.remove(id);
      });
      // its model leaves memory unless another project serves it (a later call by job id loads it again)
      const job = deployed ? await store.trainingJobs.get(deployed) : undefined;
      let elsewhere = false;
      for (const o of await store.projects.listByTeam(p.team_id)) if (await jobOf(o.active_deployment_id) === deployed) elsewhere = true;
      if (job && !elsewhere) runtime.unload?.(refOf(job));
    },

    async deploy(p: Principal, projectId: string, trainingJobId: string) {
      await own(p, projectId);
      const job = await store.trainingJobs.get(trainingJobId);
      if (!job || job.team_id !== p.team_id) throw new NotFoundError(`Training job ${trainingJobId} not found`);
      if (job.status !== 'complete' && job.status !== 'deployed') throw new ConflictError(`Training job ${trainingJobId} is ${job.status}; only complete jobs can be deployed`);
      const d: DeploymentRecord = {
        deployment_id: newId(), project_id: projectId, team_id: p.team_id, training_job_id: trainingJobId, status: 'deploying', error: null,
        created_at: nowIso(), activated_at: null, replaced_at: null,
      };
      await store.tx((t) => t.deployments.put(d));
      const ref = refOf(job);
      if (runtime.status(ref).state === 'ready') {
        await activate(d.deployment_id);
      } else {
        const w: Promise<void> = warmJob(job).then(() => activate(d.deployment_id), (err) => {
          deps.log?.warn({ deployment: d.deployment_id, err: String(err) }, 'deployment failed');
          return failDeployment(d.deployment_id, err);
        }).finally(() => pending.delete(w));
        pending.add(w);
      }
      return deploymentView((await store.deployments.get(d.deployment_id)) ?? d);
    },

    async listDeployments(p: Principal, projectId: string) {
      await own(p, projectId);
      const deployments = (await store.deployments.listByProject(projectId)).map(deploymentView);
      return { deployments, count: deployments.length };
    },

    /** POST /projects/:id/inference: served by the active deployment */
    async infer(p: Principal, projectId: string, body: { text: string; schema?: unknown; task?: string; messages?: GenerateMessage[]; threshold?: number; include_confidence?: boolean; include_spans?: boolean; max_tokens?: number; temperature?: number; store?: boolean }, ctx: { signal?: AbortSignal } = {}) {
      const pr = await own(p, projectId);
      if (!pr.active_deployment_id) {
        const deploying = (await store.deployments.listByProject(projectId)).some((d) => d.status === 'deploying');
        if (deploying) throw new ConflictError(`Project ${pr.name} has a deployment still provisioning; retry shortly`);
        throw new NotFoundError(`Project ${pr.name} has no active deployment`);
      }
      const dep = (await store.deployments.get(pr.active_deployment_id))!;
      const job = await store.trainingJobs.get(dep.training_job_id);
      if (!job) throw new NotFoundError(`The deployed training job ${dep.training_job_id} no longer exists`);
      const c = { endpoint: `/projects/:id/inference`, project_id: projectId, signal: ctx.signal };
      if (job.task_type === 'decoder' || body.task === 'generate') {
        const messages = body.messages ?? [{ role: 'user' as const, content: body.text }];
        return deps.inference.runDecoder(p, { model_id: job.id, messages, max_tokens: body.max_tokens, temperature: body.temperature, store: body.store }, c);
      }
      return deps.inference.runEncoder(p, { model_id: job.id, text: body.text, schema: body.schema, threshold: body.threshold, include_confidence: body.include_confidence, include_spans: body.include_spans, store: body.store, task: body.task }, c);
    },

    /** wait for background deployments (tests), at most `timeoutMs` (shutdown must not hang on a warm-up) */
    async settle(timeoutMs = 10_000): Promise<void> {
      await Promise.race([Promise.allSettled([...pending]), new Promise((r) => { const tm = setTimeout(r, timeoutMs); void Promise.allSettled([...pending]).then(() => clearTimeout(tm)); })]);
    },

    /** after a restart: deployments left `deploying` warm again and activate when ready */
    async resumePending(): Promise<number> {
      let n = 0;
      for (const d of await store.deployments.all()) {
        if (d.status !== 'deploying') continue;
        const job = await store.trainingJobs.get(d.training_job_id);
        if (!job) { void failDeployment(d.deployment_id, new Error('training job no longer exists')); continue; }
        const w: Promise<void> = warmJob(job).then(() => activate(d.deployment_id), (err) => failDeployment(d.deployment_id, err))
          .finally(() => pending.delete(w));
        pending.add(w);
        n++;
      }
      return n;
    },
  };
}
export type ProjectsService = ReturnType<typeof createProjectsService>;
