// Adaptive inference: corrections retrain the deployed model of a project.
//
// A correction (history.submitFeedback) is a labeled example in the task's training format
// (./corrections.ts). A retraining run is triggered by hand (POST /projects/:id/retrain) or by the
// project's policy (./policy.ts: as soon as `min_new_corrections` new ones exist, or every
// `schedule_minutes`). One store transaction creates the run and marks the corrections it consumes,
// after checking that none is in progress and enough are new: a trigger fires once, even across a
// crash (the policy is checked again at start-up, against what the store holds).
// A run moves preparing → training → evaluating → promoted | rejected (| failed | cancelled):
//   preparing   datasets (ordinary dataset versions): `corrections-<project>` (every correction of the
//               project so far), `retrain-<project>` (the new corrections not held out + a seeded
//               replay sample, `replay_fraction` of the data the deployed model was trained on) and
//               `holdout-<project>` (held-out corrections + the policy's `eval_dataset`); then an
//               ordinary training job continuing from the deployed model (its weights, or its LoRA
//               adapter), marked `adaptive` with the run and its trigger
//   training    the job runs (visible, logged, stoppable); stopped or failed → the run ends and its
//               corrections are free for the next run
//   evaluating  two evaluations (src/service/evaluations.ts) on the held-out version: the new model
//               and the active deployment; F1 gain >= `min_gain` → deployed, else a `rejected` entry
//               in the deployment history. Scores, decision and reason go on the run, the job (and
//               its log) and the deployment entry.
// Runs advance on a timer from what the store holds, so a restart resumes them where they were.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type {
  AdaptivePolicy,
  AdaptiveRunRecord,
  LabeledExampleRecord,
  ProjectRecord,
  Store,
  TrainingJobRecord,
  Tx,
} from '../../store/index.ts';
import type { Principal } from '../auth.ts';
import type { DatasetsService } from '../datasets.ts';
import { ConflictError, NotFoundError, ValidationError } from '../errors.ts';
import type { EvaluationsService } from '../evaluations.ts';
import { newId, nowIso } from '../ids.ts';
import type { Logger } from '../index.ts';
import type { ProjectsService } from '../projects.ts';
import type { TrainingJobsService } from '../training-jobs.ts';
import { policyOf } from './policy.ts';

export { correctionRecord } from './corrections.ts';
export { adaptivePolicySchema, DEFAULT_POLICY, policyOf } from './policy.ts';

const ACTIVE = new Set<AdaptiveRunRecord['status']>(['preparing', 'training', 'evaluating']);
const TICK_MS = 500;
/** a dataset version of a run not ready by then fails the run (its corrections are freed) */
const PREPARE_TIMEOUT_MS = 5 * 60_000;

type Job = TrainingJobRecord & { datasets?: Array<{ version_id: string }>; configuration?: Record<string, unknown> };

export const runView = (r: AdaptiveRunRecord) => ({
  id: r.id,
  project_id: r.project_id,
  trigger: r.trigger,
  status: r.status,
  from_deployment_id: r.from_deployment_id,
  from_training_job_id: r.from_job_id,
  training_job_id: r.training_job_id,
  new_corrections: r.train_example_ids.length + r.holdout_example_ids.length,
  train_corrections: r.train_example_ids.length,
  holdout_corrections: r.holdout_example_ids.length,
  corrections_dataset: r.corrections_version,
  train_dataset: r.train_dataset,
  holdout_dataset: r.holdout_dataset,
  evaluation_ids: r.evaluation_ids,
  scores: r.scores,
  decision: r.decision,
  reason: r.reason,
  deployment_id: r.deployment_id,
  error: r.error,
  created_at: r.created_at,
  updated_at: r.updated_at,
});

/** a dataset name from a project name (DATASET_NAME: letters, digits, ".", "_", "-") */
const slug = (name: string) =>
  name
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 100) || 'project';
export const datasetNames = (pr: ProjectRecord) => {
  const s = slug(pr.name);
  return { corrections: `corrections-${s}`, train: `retrain-${s}`, holdout: `holdout-${s}` };
};

/** a deterministic order of ids (by hash with a seed): the held-out split and the replay sample */
const hashOrder = <T>(xs: T[], key: (x: T) => string, seed: string) =>
  xs
    .map((x) => ({ x, h: createHash('sha256').update(seed).update(key(x)).digest('hex') }))
    .sort((a, b) => a.h.localeCompare(b.h))
    .map((o) => o.x);

export function createAdaptiveService(deps: {
  store: Store;
  datasets: DatasetsService;
  trainingJobs: TrainingJobsService;
  evaluations: EvaluationsService;
  projects: ProjectsService;
  log?: Logger;
}) {
  const { store, datasets, trainingJobs, evaluations, projects } = deps;
  const busy = new Set<string>();
  const dirty = new Set<string>();
  let timer: NodeJS.Timeout | null = null;
  let closing = false;

  const principalOf = async (teamId: string): Promise<Principal> => ({
    kind: 'key',
    team_id: teamId,
    user_id: 'adaptive',
    key_id: null,
    team: (await store.teams.get(teamId))!,
    session: null,
  });

  async function own(p: Principal, id: string): Promise<ProjectRecord> {
    const pr = await store.projects.get(id);
    if (!pr || pr.team_id !== p.team_id) throw new NotFoundError(`Project ${id} not found`);
    return pr;
  }

  /** the job the active deployment serves, or why there is none */
  async function deployed(pr: ProjectRecord, t: Tx = store): Promise<{ depId: string; job: Job } | string> {
    if (!pr.active_deployment_id) return `project ${pr.name} has no active deployment: deploy a trained model first`;
    const dep = await t.deployments.get(pr.active_deployment_id);
    const job = dep ? ((await t.trainingJobs.get(dep.training_job_id)) as Job | undefined) : undefined;
    if (!dep || !job) return `the deployed training job of project ${pr.name} no longer exists`;
    return { depId: dep.deployment_id, job };
  }

  /** jobs ever deployed in the project: corrections of inferences by job id count for it too */
  const projectJobs = async (projectId: string, t: Tx = store) =>
    new Set((await t.deployments.listByProject(projectId)).map((d) => d.training_job_id));

  /** the project's corrections no run has consumed, oldest first, fit for a model of `kind` */
  async function pendingExamples(
    pr: ProjectRecord, kind: 'encoder' | 'decoder', t: Tx = store,
  ): Promise<LabeledExampleRecord[]> {
    const jobs = await projectJobs(pr.id, t);
    return (await t.examples.listByTeam(pr.team_id))
      .filter(
        (e) =>
          !e.run_id &&
          e.record &&
          (e.project_id === pr.id || (!e.project_id && jobs.has(e.model_id))) &&
          'messages' in e.record === (kind === 'decoder'),
      );
  }

  async function allExamples(pr: ProjectRecord): Promise<LabeledExampleRecord[]> {
    const jobs = await projectJobs(pr.id);
    return (await store.examples.listByTeam(pr.team_id))
      .filter((e) => e.record && (e.project_id === pr.id || (!e.project_id && jobs.has(e.model_id))));
  }

  const activeRun = async (projectId: string, t: Tx = store) =>
    (await t.adaptiveRuns.listByProject(projectId)).find((r) => ACTIVE.has(r.status));

  async function patchRun(
    id: string,
    fn: (r: AdaptiveRunRecord) => Partial<AdaptiveRunRecord> | null,
    also?: (t: Tx, r: AdaptiveRunRecord) => Promise<void>,
  ) {
    return store.tx(async (t) => {
      const r = await t.adaptiveRuns.get(id);
      if (!r) return undefined;
      const ch = fn(r);
      if (!ch) return r;
      const nr = { ...r, ...ch, updated_at: nowIso() };
      t.adaptiveRuns.put(nr);
      await also?.(t, nr);
      return nr;
    });
  }

  /** inside a transaction: the run's corrections are free again (a run that ended without a model) */
  async function release(t: Tx, r: AdaptiveRunRecord) {
    for (const id of [...r.train_example_ids, ...r.holdout_example_ids]) {
      const e = await t.examples.get(id);
      if (e?.run_id === r.id) await t.examples.put({ ...e, run_id: null, training_job_id: null, split: null });
    }
  }

  /** inside a transaction: a line in the job's log and its `adaptive` marker updated */
  async function markJob(t: Tx, jobId: string | null, ch: Record<string, unknown>, message?: string) {
    if (!jobId) return;
    const j = await t.trainingJobs.get(jobId);
    if (!j) return;
    t.trainingJobs.put({ ...j, adaptive: { ...(j.adaptive as object), ...ch }, updated_at: nowIso() });
    if (message) await t.trainingArtifacts.appendLog(jobId, 'info', message);
  }

  async function end(r: AdaptiveRunRecord, status: 'failed' | 'cancelled', error: string) {
    deps.log?.warn({ run: r.id, project: r.project_id, error }, 'adaptive run ended without a model');
    await patchRun(
      r.id,
      (cur) => (ACTIVE.has(cur.status) ? { status, error } : null),
      async (t, nr) => {
        await release(t, nr);
        await markJob(t, nr.training_job_id, { status, error });
      },
    );
  }

  /**
   * Creates a run if the project has an active deployment, no run in progress and at least `min`
   * new corrections, all in one transaction with the marks on the corrections it consumes.
   */
  async function trigger(
    pr0: ProjectRecord,
    how: AdaptiveRunRecord['trigger'],
    min: number,
  ): Promise<AdaptiveRunRecord | string> {
    const out = await store.tx(async (t): Promise<AdaptiveRunRecord | string> => {
      const pr = await t.projects.get(pr0.id);
      if (!pr) return `project ${pr0.name} no longer exists`;
      const d = await deployed(pr, t);
      if (typeof d === 'string') return d;
      if (d.job.status !== 'complete' && d.job.status !== 'deployed')
        return `the deployed training job ${d.job.id} is ${d.job.status}`;
      const busyRun = await activeRun(pr.id, t);
      if (busyRun) return `retraining run ${busyRun.id} of project ${pr.name} is still ${busyRun.status}`;
      const policy = policyOf(pr.adaptive);
      const pending = await pendingExamples(pr, d.job.task_type, t);
      if (pending.length === 0) return `project ${pr.name} has no new corrections since its last retraining`;
      if (pending.length < min)
        return `project ${pr.name} has ${pending.length} new correction(s); the policy waits for ${min}`;
      const last = (await t.adaptiveRuns.listByProject(pr.id))[0];
      if (how === 'policy' && last?.status === 'failed' && !pending.some((e) => e.created_at > last.created_at)) {
        // the corrections of a failed run are free again, but the policy does not retry them in a loop
        return (
          `the last retraining run ${last.id} failed (${last.error}); ` +
          'the policy waits for a new correction or a manual retrain'
        );
      }
      if (pending.length < 2 && !policy.eval_dataset) {
        return (
          `project ${pr.name} has 1 new correction: retraining holds part of the corrections out for evaluation, ` +
          'so it needs at least 2 (or an eval_dataset in the policy)'
        );
      }
      const id = newId();
      const order = hashOrder(pending, (e) => e.id, id);
      const nHold =
        pending.length < 2
          ? 0
          : Math.min(pending.length - 1, Math.max(1, Math.round(pending.length * policy.holdout_fraction)));
      const hold = new Set(order.slice(0, nHold).map((e) => e.id));
      const now = nowIso();
      const run: AdaptiveRunRecord = {
        id,
        team_id: pr.team_id,
        project_id: pr.id,
        trigger: how,
        status: 'preparing',
        from_deployment_id: d.depId,
        from_job_id: d.job.id,
        train_example_ids: pending.filter((e) => !hold.has(e.id)).map((e) => e.id),
        holdout_example_ids: pending.filter((e) => hold.has(e.id)).map((e) => e.id),
        corrections_version: null,
        train_dataset: null,
        holdout_dataset: null,
        training_job_id: null,
        evaluation_ids: null,
        scores: null,
        decision: null,
        reason: null,
        deployment_id: null,
        error: null,
        created_at: now,
        updated_at: now,
      };
      t.adaptiveRuns.put(run);
      for (const e of pending) await t.examples.put({ ...e, run_id: id, split: hold.has(e.id) ? 'holdout' : 'train' });
      if (how === 'policy') t.projects.put({ ...pr, adaptive_checked_at: now });
      return run;
    });
    if (typeof out !== 'string') {
      deps.log?.info(
        {
          run: out.id,
          project: out.project_id,
          trigger: how,
          corrections: out.train_example_ids.length + out.holdout_example_ids.length,
        },
        'adaptive retraining triggered',
      );
      kick();
    }
    return out;
  }

  // ---- preparing -------------------------------------------------------------------------------

  const jsonl = (rows: unknown[]) => rows.map((x) => JSON.stringify(x)).join('\n') + '\n';

  /** a ready dataset version made from records (waits for its processing) */
  async function makeVersion(teamId: string, name: string, type: 'custom' | 'decoder', rows: unknown[], file: string) {
    const v = await datasets.createVersionFromRecords(teamId, name, type, jsonl(rows), file);
    const until = Date.now() + PREPARE_TIMEOUT_MS;
    for (;;) {
      if (Date.now() > until)
        throw new Error(
          `dataset ${name} version ${v.version_number} was not processed within ${PREPARE_TIMEOUT_MS / 1000} s`,
        );
      const cur = await store.datasets.getVersion(v.id);
      if (!cur) throw new Error(`dataset ${name} was deleted while it was prepared`);
      if (cur.status === 'ready') return cur;
      if (cur.status === 'failed')
        throw new Error(`dataset ${name} version ${cur.version_number} failed: ${cur.processing_error}`);
      if (closing) throw new Error('shutting down');
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** the records the job trained on (its dataset versions' canonical files) */
  async function trainedOn(job: Job): Promise<string[]> {
    const lines: string[] = [];
    for (const d of job.datasets ?? []) {
      const v = await store.datasets.getVersion(d.version_id);
      if (!v || v.status !== 'ready') continue;
      const text = await readFile(await datasets.localDataFile(v), 'utf8');
      for (const l of text.split('\n')) if (l.trim()) lines.push(l);
    }
    return lines;
  }

  async function prepare(r0: AdaptiveRunRecord) {
    let r = r0;
    const pr = await store.projects.get(r.project_id);
    const from = (await store.trainingJobs.get(r.from_job_id)) as Job | undefined;
    if (!pr) return end(r, 'cancelled', 'the project was deleted');
    if (!from) return end(r, 'failed', `the deployed training job ${r.from_job_id} no longer exists`);
    const policy = policyOf(pr.adaptive);
    const p = await principalOf(r.team_id);
    // a job already created for this run (a restart between its creation and the run's update)
    const existing = ((await store.trainingJobs.listByTeam(r.team_id)) as Job[]).find(
      (j) => (j.adaptive as { run_id?: string } | undefined)?.run_id === r.id,
    );
    if (existing) return started(r, existing.id);
    const names = datasetNames(pr);
    const type = from.task_type === 'decoder' ? ('decoder' as const) : ('custom' as const);
    const recordOf = async (id: string) => (await store.examples.get(id))?.record;
    const train = (await Promise.all(r.train_example_ids.map(recordOf))).filter(Boolean);
    const hold = (await Promise.all(r.holdout_example_ids.map(recordOf))).filter(Boolean);
    const pool = await trainedOn(from);
    const replay = hashOrder(pool, (l) => l, r.id)
      .slice(0, Math.round(pool.length * policy.replay_fraction))
      .map((l) => JSON.parse(l));
    let evalRows: unknown[] = [];
    if (policy.eval_dataset) {
      const v = await datasets.readyVersion(r.team_id, policy.eval_dataset);
      evalRows = (await readFile(await datasets.localDataFile(v), 'utf8'))
        .split('\n')
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l));
    }
    // each version is recorded on the run as soon as it is ready: a restart reuses it
    if (!r.corrections_version) {
      const cv = await makeVersion(
        r.team_id,
        names.corrections,
        type,
        (await allExamples(pr)).map((e) => e.record),
        `${names.corrections}.jsonl`,
      );
      r = (await patchRun(r.id, () => ({ corrections_version: cv.version_number })))!;
    }
    if (!r.train_dataset) {
      const tv = await makeVersion(r.team_id, names.train, type, [...train, ...replay], `${names.train}.jsonl`);
      r = (await patchRun(r.id, () => ({
        train_dataset: { name: tv.dataset_name, version: tv.version_number, size: tv.size, replayed: replay.length },
      })))!;
    }
    if (!r.holdout_dataset) {
      const hv = await makeVersion(r.team_id, names.holdout, type, [...hold, ...evalRows], `${names.holdout}.jsonl`);
      r = (await patchRun(r.id, () => ({
        holdout_dataset: { name: hv.dataset_name, version: hv.version_number, size: hv.size },
      })))!;
    }
    const tv = r.train_dataset!;
    const c = from.configuration ?? {};
    const pick = (k: string) => (c[k] === null || c[k] === undefined ? {} : { [k]: c[k] });
    const n = (await store.adaptiveRuns.listByProject(r.project_id)).length;
    const body = {
      base_model: from.id,
      datasets: [{ name: tv.name, version: tv.version }],
      project_id: r.project_id,
      model_name: `${String(from.model_name).replace(/-adaptive-\d+$/, '')}-adaptive-${n}`.slice(0, 200),
      training_type: from.training_type as 'lora' | 'full',
      validation_data_percentage: 0,
      ...pick('nr_epochs'),
      ...pick('learning_rate'),
      ...pick('encoder_learning_rate'),
      ...pick('batch_size'),
      ...pick('seed'),
      ...pick('lora_r'),
      ...pick('lora_alpha'),
      ...pick('lora_dropout'),
      ...(policy.nr_epochs ? { nr_epochs: policy.nr_epochs } : {}),
      ...(policy.learning_rate ? { learning_rate: policy.learning_rate } : {}),
    };
    const marker = {
      run_id: r.id,
      trigger: r.trigger,
      project_id: r.project_id,
      from_training_job_id: from.id,
      from_deployment_id: r.from_deployment_id,
      status: 'training',
    };
    const job = await trainingJobs.create(p, body as Parameters<TrainingJobsService['create']>[1], {
      adaptive: marker,
    });
    await started(r, job.id);
  }

  async function started(r: AdaptiveRunRecord, jobId: string) {
    await patchRun(
      r.id,
      (cur) => (cur.status === 'preparing' ? { status: 'training', training_job_id: jobId } : null),
      async (t, nr) => {
        for (const id of [...nr.train_example_ids, ...nr.holdout_example_ids]) {
          const e = await t.examples.get(id);
          if (e?.run_id === nr.id) await t.examples.put({ ...e, training_job_id: jobId });
        }
        const d = nr.train_dataset,
          h = nr.holdout_dataset;
        await t.trainingArtifacts.appendLog(
          jobId,
          'info',
          `adaptive retraining (${nr.trigger} trigger, run ${nr.id}): ` +
            `continues from the deployed model ${nr.from_job_id}; ` +
            `${nr.train_example_ids.length} new correction(s) + ${d?.replayed ?? 0} replayed record(s) ` +
            `in ${d?.name} v${d?.version}; ${nr.holdout_example_ids.length} correction(s) held out ` +
            `in ${h?.name} v${h?.version} (${h?.size} records) for the evaluation`,
        );
      },
    );
  }

  // ---- training → evaluating → decision ---------------------------------------------------------

  async function afterTraining(r: AdaptiveRunRecord) {
    const job = await store.trainingJobs.get(r.training_job_id!);
    if (!job) return end(r, 'cancelled', `training job ${r.training_job_id} was deleted`);
    if (job.status === 'failed') return end(r, 'failed', `training job ${job.id} failed: ${String(job.error ?? '')}`);
    if (job.status === 'cancelled') return end(r, 'cancelled', `training job ${job.id} was stopped`);
    if (job.status !== 'complete' && job.status !== 'deployed') return; // still requested / running
    const p = await principalOf(r.team_id);
    const h = r.holdout_dataset!;
    const ev = (model: string) =>
      evaluations.create(p, {
        base_model: model,
        dataset_name: h.name,
        dataset_version: h.version,
        project_id: r.project_id,
      });
    const cand = (await ev(job.id)).evaluations[0]!.id;
    const dep = (await ev(r.from_job_id)).evaluations[0]!.id;
    await patchRun(
      r.id,
      (cur) =>
        cur.status === 'training' ? { status: 'evaluating', evaluation_ids: { candidate: cand, deployed: dep } } : null,
      (t, nr) =>
        markJob(
          t,
          nr.training_job_id,
          { status: 'evaluating', evaluation_ids: nr.evaluation_ids },
          'adaptive retraining: training done; evaluating the new model and the deployed one on ' +
            `${h.name} v${h.version}`,
        ),
    );
  }

  async function decide(r: AdaptiveRunRecord) {
    const ids = r.evaluation_ids!;
    const c = await store.evaluations.get(ids.candidate),
      d = await store.evaluations.get(ids.deployed);
    if (!c || !d) return end(r, 'failed', 'an evaluation of the run was deleted');
    if (c.status === 'failed' || d.status === 'failed')
      return end(r, 'failed', `evaluation failed: ${c.error ?? d.error}`);
    if (c.status !== 'complete' || d.status !== 'complete') return;
    const pr = await store.projects.get(r.project_id);
    if (!pr) return end(r, 'cancelled', 'the project was deleted');
    const policy = policyOf(pr.adaptive);
    const cf = c.f1_score ?? 0,
      df = d.f1_score ?? 0,
      gain = Math.round((cf - df) * 1e6) / 1e6;
    const moved = pr.active_deployment_id !== r.from_deployment_id;
    const promote = !moved && gain >= policy.min_gain;
    const reason = moved
      ? 'the active deployment changed while the model was retrained; the new model is not deployed over it'
      : `held-out F1 ${cf.toFixed(4)} vs ${df.toFixed(4)} for the deployed model: ` +
        `gain ${gain >= 0 ? '+' : ''}${gain.toFixed(4)} ${promote ? '>=' : '<'} min_gain ${policy.min_gain} ` +
        `on ${c.sample_count} held-out example(s)`;
    const scores = { candidate: cf, deployed: df, gain, metric: 'f1' as const };
    const decision = promote ? ('promote' as const) : ('reject' as const);
    const info = { run_id: r.id, decision, candidate_f1: cf, deployed_f1: df, gain, reason };
    let depId: string | null = null;
    if (promote) {
      const dv = await projects.deploy(await principalOf(r.team_id), r.project_id, r.training_job_id!);
      depId = dv.deployment_id;
      await store.tx(async (t) => {
        const x = await t.deployments.get(dv.deployment_id);
        if (x) t.deployments.put({ ...x, adaptive: info });
      });
    } else {
      depId = newId();
      const now = nowIso();
      await store.tx((t) =>
        t.deployments.put({
          deployment_id: depId!,
          project_id: r.project_id,
          team_id: r.team_id,
          training_job_id: r.training_job_id!,
          status: 'rejected',
          error: null,
          created_at: now,
          activated_at: null,
          replaced_at: null,
          adaptive: info,
        }),
      );
    }
    await patchRun(
      r.id,
      () => ({ status: promote ? 'promoted' : 'rejected', scores, decision, reason, deployment_id: depId }),
      (t, nr) =>
        markJob(
          t,
          nr.training_job_id,
          { status: nr.status, scores, decision, reason, deployment_id: depId },
          `adaptive retraining: ${promote ? 'promoted' : 'not promoted'}: ${reason}`,
        ),
    );
    deps.log?.info({ run: r.id, project: r.project_id, decision, gain }, 'adaptive retraining decided');
  }

  async function advance(r: AdaptiveRunRecord) {
    if (busy.has(r.id)) return;
    busy.add(r.id);
    try {
      if (r.status === 'preparing') await prepare(r);
      else if (r.status === 'training') await afterTraining(r);
      else if (r.status === 'evaluating') await decide(r);
    } catch (e) {
      if (closing) return;
      const cur = await store.adaptiveRuns.get(r.id);
      if (cur) await end(cur, 'failed', e instanceof Error ? e.message : String(e));
    } finally {
      busy.delete(r.id);
    }
  }

  /** the policy of one project: trigger when due */
  async function check(projectId: string) {
    const pr = await store.projects.get(projectId);
    const policy = pr ? policyOf(pr.adaptive) : null;
    if (!pr || !policy?.enabled) return;
    if (policy.schedule_minutes) {
      const last = pr.adaptive_checked_at ? Date.parse(pr.adaptive_checked_at) : Date.parse(pr.created_at);
      if (Date.now() - last < policy.schedule_minutes * 60_000) return;
    }
    const out = await trigger(pr, 'policy', policy.min_new_corrections);
    if (typeof out === 'string' && policy.schedule_minutes) {
      // the scheduled check happened: the next one is a period later
      await store.tx(async (t) => {
        const cur = await t.projects.get(projectId);
        if (cur) t.projects.put({ ...cur, adaptive_checked_at: nowIso() });
      });
    }
  }

  let ticking = false;
  async function tick() {
    if (ticking || closing) return;
    ticking = true;
    try {
      for (const r of await store.adaptiveRuns.all()) if (ACTIVE.has(r.status)) await advance(r);
      const todo = [...dirty];
      dirty.clear();
      for (const id of todo) await check(id);
    } catch (e) {
      deps.log?.error({ err: String(e) }, 'adaptive tick failed');
    } finally {
      ticking = false;
    }
  }
  function kick() {
    setImmediate(() => void tick());
  }

  return {
    /** GET /projects/:id/adaptive: the policy, the corrections waiting and the runs (newest first) */
    async status(p: Principal, projectId: string) {
      const pr = await own(p, projectId);
      const d = await deployed(pr);
      const pending = (await pendingExamples(pr, typeof d === 'string' ? 'encoder' : d.job.task_type)).length;
      const runs = (await store.adaptiveRuns.listByProject(pr.id)).map(runView);
      return {
        project_id: pr.id,
        policy: policyOf(pr.adaptive),
        datasets: datasetNames(pr),
        new_corrections: pending,
        runs,
        count: runs.length,
      };
    },

    /** PATCH /projects/:id {adaptive}: merges the patch into the policy */
    async setPolicy(p: Principal, projectId: string, patch: Partial<AdaptivePolicy>) {
      await own(p, projectId);
      if (patch.eval_dataset) {
        try {
          await datasets.readyVersion(p.team_id, patch.eval_dataset);
        } catch (e) {
          if (e instanceof NotFoundError || e instanceof ValidationError) {
            throw new ValidationError(`adaptive.eval_dataset: ${e.message}`, [
              { path: '/adaptive/eval_dataset', message: e.message, keyword: 'dataset' },
            ]);
          }
          throw e;
        }
      }
      const pr = await store.tx(async (t) => {
        const cur = (await t.projects.get(projectId))!;
        const np: ProjectRecord = { ...cur, adaptive: { ...policyOf(cur.adaptive), ...patch } };
        t.projects.put(np);
        return np;
      });
      dirty.add(projectId);
      kick();
      return {
        id: pr.id,
        name: pr.name,
        active_deployment_id: pr.active_deployment_id,
        adaptive: policyOf(pr.adaptive),
      };
    },

    /** POST /projects/:id/retrain: 409 with the reason when nothing can be retrained */
    async retrain(p: Principal, projectId: string) {
      const pr = await own(p, projectId);
      const out = await trigger(pr, 'manual', 1);
      if (typeof out === 'string') throw new ConflictError(`Cannot retrain: ${out}`);
      return runView(out);
    },

    /** a correction was stored or withdrawn (history): the project's policy is checked */
    corrected(e: { project_id: string | null; model_id: string; team_id: string }) {
      if (e.project_id) {
        dirty.add(e.project_id);
        kick();
        return;
      }
      void (async () => {
        for (const pr of await store.projects.listByTeam(e.team_id)) {
          if ((await projectJobs(pr.id)).has(e.model_id)) dirty.add(pr.id);
        }
        kick();
      })().catch((err) => deps.log?.error({ err: String(err) }, 'adaptive: correction not noted'));
    },

    /** start the timer; after a restart every policy is checked again and runs resume */
    async start() {
      for (const pr of await store.projects.all()) if (pr.adaptive?.enabled) dirty.add(pr.id);
      timer = setInterval(() => {
        void (async () => {
          for (const pr of await store.projects.all()) if (pr.adaptive?.enabled && pr.adaptive.schedule_minutes) dirty.add(pr.id);
          await tick();
        })().catch((err) => deps.log?.error({ err: String(err) }, 'adaptive tick failed'));
      }, TICK_MS);
      timer.unref();
      kick();
    },

    /** wait until no run is in progress (tests), at most `timeoutMs` */
    async idle(timeoutMs = 60_000) {
      const until = Date.now() + timeoutMs;
      while (Date.now() < until && (await store.adaptiveRuns.all()).some((r) => ACTIVE.has(r.status)))
        await new Promise((r) => setTimeout(r, 100));
    },

    async shutdown() {
      closing = true;
      if (timer) clearInterval(timer);
    },
  };
}
export type AdaptiveService = ReturnType<typeof createAdaptiveService>;
