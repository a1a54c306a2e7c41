// Synthetic data generation (POST /generate, GET /generate/jobs/:id) and auto-labeling
// (POST /generate/ner/label-existing, /generate/classification/label-existing).
//
// Generation uses the models Loom serves, through the inference service (so calls are billed and
// recorded like any inference): a decoder writes the texts; labels come from the construction
// (classification: one text written per requested class) or from an encoder (ner: the written
// texts are auto-labeled with the requested entity types); decoder datasets are
// (question, answer) conversations the decoder writes from `prompt` / `domain_description`.
// The examples become a new version of `dataset_name` (processed and validated like an upload).
// States: queued → generating → ready | failed. At most `generationConcurrency` jobs generate at
// once over all teams and `generationConcurrencyPerTeam` per team; the rest wait `queued`, started
// in the order they were created as slots free up (a team at its cap does not hold up others).
// On PostgreSQL (the durable queue) a job is enqueued and run by a process with the 'worker' role; the
// caps hold over all workers: the claim (queued → generating, with the lease) counts the generating
// jobs in the store in the same serializable transaction, and a job that cannot start is sent again
// with a delay (RETRY_S) rather than held in a handler, so a worker's slots stay free for other teams.
import type { GenerationJobRecord, Store } from '../store/index.ts';
import type { Principal } from './auth.ts';
import type { ServiceConfig } from './config.ts';
import type { DatasetsService } from './datasets.ts';
import { DATASET_NAME } from './datasets.ts';
import { NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';
import type { Logger } from './index.ts';
import type { InferenceService } from './inference.ts';
import type { Leases } from './jobs/leases.ts';
import type { JobQueue } from './jobs/queue.ts';
import { ROUTER_MODEL_ID } from './router.ts';
import { CLASSIFICATION_TASK } from '../training/encoder/recipe.ts';

export interface GenerateRequest {
  task_type: 'ner' | 'classification' | 'decoder';
  dataset_name: string;
  num_examples?: number;
  labels?: string[];
  domain_description?: string;
  classified_examples?: Array<{ text: string; label: string }>;
  prompt?: string;
  /** decoder that writes (default: the router's choice) */
  model_id?: string;
  /** encoder that labels ner texts (default: the router's choice) */
  labeling_model_id?: string;
  temperature?: number;
  seed?: number;
}

export const generateRequestSchema = {
  type: 'object', required: ['task_type', 'dataset_name'],
  properties: {
    task_type: { enum: ['ner', 'classification', 'decoder'] },
    dataset_name: { type: 'string', minLength: 1, maxLength: 128 },
    num_examples: { type: 'integer', minimum: 1, maximum: 1000 },
    labels: { type: 'array', minItems: 1, maxItems: 100, items: { type: 'string', minLength: 1 } },
    domain_description: { type: 'string', maxLength: 5000 },
    classified_examples: { type: 'array', maxItems: 50, items: { type: 'object', required: ['text', 'label'], properties: { text: { type: 'string', minLength: 1 }, label: { type: 'string', minLength: 1 } } } },
    prompt: { type: 'string', maxLength: 10_000 },
    model_id: { type: 'string', minLength: 1 },
    labeling_model_id: { type: 'string', minLength: 1 },
    temperature: { type: 'number', minimum: 0, maximum: 2 },
    seed: { type: 'integer' },
  },
};

export const labelExistingSchema = (minLabels: number) => ({
  type: 'object', required: ['labels', 'inputs'],
  properties: {
    labels: { type: 'array', minItems: minLabels, maxItems: 100, items: { type: 'string', minLength: 1 } },
    inputs: { type: 'array', minItems: 1, maxItems: 1000, items: { type: 'string', minLength: 1 } },
    model_id: { type: 'string', minLength: 1 },
    threshold: { type: 'number', minimum: 0, maximum: 1 },
  },
});

/** a job record on the queue also names its requester (the worker runs the job as them) */
type QueuedJob = GenerationJobRecord & { principal?: Pick<Principal, 'kind' | 'user_id' | 'key_id'> };

const jobView = (j: GenerationJobRecord) => ({
  job_id: j.job_id, status: j.status, dataset_name: j.dataset_name, count: j.count, task_type: j.task_type, error: j.error, created_at: j.created_at,
  num_examples: j.num_examples, updated_at: j.updated_at, version_id: j.version_id,
});

export function createGenerationService(deps: {
  store: Store; config: ServiceConfig; inference: InferenceService; datasets: DatasetsService; log?: Logger;
  /**
   * a job is held (waiting in this process's memory, or generating here) under a lease taken when it is
   * created; one whose process is gone is failed with the reason by the supervisor of a live process
   */
  leases: Leases;
  /**
   * the durable queue (PostgreSQL store): jobs are enqueued and run by processes with the 'worker'
   * role, which take the lease when one starts generating; null: the accepting process runs them
   */
  queue?: JobQueue | null;
}) {
  const { store, config, inference, datasets, leases } = deps;
  const durable = deps.queue ?? null;
  /** a queued job this old is enqueued again by the supervisor (a lost send) */
  const RESEND_AFTER_MS = 10_000;
  /** queue: a job whose team (or the service) is at its cap is fetched again after this many seconds */
  const RETRY_S = 2;
  const send = (id: string, delayS?: number) => durable?.send('generation', id, delayS)
    .catch((e) => deps.log?.warn({ job: id, err: String(e) }, 'generation job not enqueued (sent again later)'));
  /** jobs whose lease this process lost: stopped here, nothing more written */
  const lost = new Set<string>();
  const running = new Set<Promise<void>>();
  let closing = false;
  /** jobs waiting for a slot, oldest first; jobs generating per team */
  const waiting: Array<{ p: Principal; id: string; req: GenerateRequest }> = [];
  const perTeam = new Map<string, number>();

  /** start waiting jobs while the global and per-team caps allow */
  function pump(): void {
    for (let i = 0; i < waiting.length && running.size < config.generationConcurrency && !closing;) {
      const w = waiting[i];
      if ((perTeam.get(w.p.team_id) ?? 0) >= config.generationConcurrencyPerTeam) { i++; continue; }
      waiting.splice(i, 1);
      perTeam.set(w.p.team_id, (perTeam.get(w.p.team_id) ?? 0) + 1);
      const job: Promise<void> = run(w.p, w.id, w.req)
        .catch((e) => deps.log?.error({ job: w.id, err: String(e) }, 'generation failed'))
        .then(() => { if (!closing) return leases.release('generation', w.id); })
        .finally(() => {
          lost.delete(w.id);
          running.delete(job);
          const n = (perTeam.get(w.p.team_id) ?? 1) - 1;
          if (n > 0) perTeam.set(w.p.team_id, n); else perTeam.delete(w.p.team_id);
          pump();
        });
      running.add(job);
    }
  }

  async function patch(id: string, ch: Partial<GenerationJobRecord>): Promise<void> {
    if (lost.has(id)) return;
    await store.tx(async (t) => {
      const j = await t.generationJobs.get(id);
      if (j) t.generationJobs.put({ ...j, ...ch, updated_at: nowIso() });
    });
  }

  async function write(p: Principal, req: GenerateRequest, system: string, user: string, seed: number): Promise<string> {
    const r = await inference.runDecoder(p, {
      model_id: req.model_id ?? ROUTER_MODEL_ID, max_tokens: 96, temperature: req.temperature ?? 0.9, seed,
      messages: [{ role: 'system', content: system }, { role: 'user', content: user }],
    }, { endpoint: '/generate' });
    return r.result.content.replace(/\s+/g, ' ').trim();
  }

  async function run(p: Principal, id: string, req: GenerateRequest): Promise<void> {
    const n = req.num_examples ?? 20;
    const domain = req.domain_description?.trim() || 'everyday life';
    const lines: string[] = [];
    await patch(id, { status: 'generating' });
    const seed0 = req.seed ?? 1;
    try {
      for (let i = 0; i < n && !closing && !lost.has(id); i++) {
        if (req.task_type === 'classification') {
          const labels = req.labels!;
          const label = labels[i % labels.length];
          const shots = (req.classified_examples ?? []).filter((e) => e.label === label).slice(0, 3).map((e) => `Example: ${e.text}`).join('\n');
          const text = await write(p, req, 'You write short realistic texts for a text classification dataset. Answer with the text only.', `${req.prompt ? `${req.prompt}\n` : ''}Domain: ${domain}\nWrite one short text whose category is "${label}".${shots ? `\n${shots}` : ''}`, seed0 + i);
          if (text) lines.push(JSON.stringify({ text, label }));
        } else if (req.task_type === 'ner') {
          const text = await write(p, req, 'You write realistic sentences for a named entity recognition dataset. Answer with the sentence only.', `${req.prompt ? `${req.prompt}\n` : ''}Domain: ${domain}\nWrite one sentence that mentions: ${req.labels!.join(', ')}.`, seed0 + i);
          if (!text) continue;
          const r = await inference.runEncoder(p, { model_id: req.labeling_model_id ?? ROUTER_MODEL_ID, text, schema: { entities: req.labels! }, include_spans: true, include_confidence: true }, { endpoint: '/generate' });
          const entities = Object.entries((r.result as { entities?: Record<string, Array<{ start: number; end: number; text: string }>> }).entities ?? {})
            .flatMap(([label, es]) => (Array.isArray(es) ? es : []).map((e) => ({ start: e.start, end: e.end, label, text: e.text })))
            .sort((a, b) => a.start - b.start || b.end - a.end)
            .filter((e, k, all) => k === 0 || e.start >= all[k - 1].end); // non-overlapping
          lines.push(JSON.stringify({ text, entities }));
        } else {
          const question = await write(p, req, 'You write questions users ask an assistant. Answer with the question only.', `Domain: ${domain}\nWrite one question a user might ask.`, seed0 + 2 * i);
          if (!question) continue;
          const messages = [...(req.prompt ? [{ role: 'system', content: req.prompt }] : []), { role: 'user', content: question }];
          const answer = await inference.runDecoder(p, { model_id: req.model_id ?? ROUTER_MODEL_ID, max_tokens: 256, temperature: 0.7, seed: seed0 + 2 * i + 1, messages: messages as never }, { endpoint: '/generate' });
          if (answer.result.content.trim()) lines.push(JSON.stringify({ messages: [...messages, { role: 'assistant', content: answer.result.content.trim() }] }));
        }
        if ((i + 1) % 5 === 0 || i + 1 === n) await patch(id, { count: lines.length });
      }
      if (closing || lost.has(id)) return;
      if (lines.length === 0) throw new Error('the model produced no usable example');
      const type = req.task_type === 'decoder' ? 'decoder' : req.task_type;
      const v = await datasets.createVersionFromRecords(p.team_id, req.dataset_name, type, lines.join('\n') + '\n', `generated-${id}.jsonl`);
      await patch(id, { version_id: v.id, count: lines.length });
      for (;;) {
        const cur = await store.datasets.getVersion(v.id);
        if (!cur) throw new Error('the dataset was deleted while it was generated');
        if (cur.status === 'ready') { await patch(id, { status: 'ready', count: cur.size }); return; }
        if (cur.status === 'failed') throw new Error(`the generated examples did not validate: ${cur.processing_error}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    } catch (e) {
      if (closing) return;
      await patch(id, { status: 'failed', error: e instanceof Error ? e.message : String(e), count: lines.length });
    }
  }

  /**
   * queue consumer: queued → generating under this process's lease when the global and per-team caps
   * allow (counted in the claiming transaction), then run here; at a cap, sent again with a delay
   */
  async function runQueued(id: string): Promise<void> {
    const j = await leases.claim('generation', id, async (t) => {
      const cur = await t.generationJobs.get(id);
      if (!cur || cur.status !== 'queued') return null;
      const busy = (await t.generationJobs.all()).filter((x) => x.status === 'generating');
      if (busy.length >= config.generationConcurrency) return null;
      if (busy.filter((x) => x.team_id === cur.team_id).length >= config.generationConcurrencyPerTeam) return null;
      const nj: GenerationJobRecord = { ...cur, status: 'generating', updated_at: nowIso() };
      t.generationJobs.put(nj);
      return nj;
    }, () => lost.add(id));
    if (!j) {
      if ((await store.generationJobs.get(id))?.status === 'queued') await send(id, RETRY_S);
      return;
    }
    try {
      const who = (j as QueuedJob).principal;
      const team = await store.teams.get(j.team_id);
      if (!team || !who) {
        await patch(id, { status: 'failed', error: team ? 'the job has no requester' : 'the team no longer exists' });
        return;
      }
      const p: Principal = { ...who, team_id: j.team_id, team, session: null };
      await run(p, id, j.request as unknown as GenerateRequest);
    } finally {
      if (!closing) await leases.release('generation', id);
      lost.delete(id);
    }
  }

  leases.supervise('generation', {
    async inFlight() {
      const all = (await store.generationJobs.all()).filter((j) => j.status === 'queued' || j.status === 'generating');
      if (!durable) return all.map((j) => j.job_id);
      // queue: waiting jobs belong to no process (the queue holds them); a lost send is sent again
      const old = Date.now() - RESEND_AFTER_MS;
      for (const j of all) if (j.status === 'queued' && Date.parse(j.updated_at) < old) void send(j.job_id);
      return all.filter((j) => j.status === 'generating').map((j) => j.job_id);
    },
    async takeOver(t, id) {
      const j = await t.generationJobs.get(id);
      if (!j || (j.status !== 'queued' && j.status !== 'generating')) return false;
      const error = 'the server restarted (or its process was lost) during generation; start a new generation job';
      t.generationJobs.put({ ...j, status: 'failed', error, updated_at: nowIso() });
      return true;
    },
  });

  return {
    async create(p: Principal, req: GenerateRequest) {
      if (!DATASET_NAME.test(req.dataset_name) || req.dataset_name === 'upload') throw new ValidationError('dataset_name must be 1-128 letters, digits, ".", "_" or "-"', [{ path: '/dataset_name', message: 'invalid dataset name' }]);
      if (req.task_type !== 'decoder' && !req.labels?.length) throw new ValidationError(`labels are required for ${req.task_type}`, [{ path: '/labels', message: 'required' }]);
      if (req.task_type === 'classification' && req.labels!.length < 2) throw new ValidationError('classification needs at least two labels', [{ path: '/labels', message: 'must have at least 2 items' }]);
      const existing = await store.datasets.byName(p.team_id, req.dataset_name);
      const want = req.task_type === 'decoder' ? 'decoder' : req.task_type;
      if (existing && existing.dataset_type !== want && existing.dataset_type !== 'custom') throw new ValidationError(`Dataset ${req.dataset_name} holds ${existing.dataset_type} data`, [{ path: '/dataset_name', message: `holds ${existing.dataset_type} data` }]);
      const now = nowIso();
      const j: GenerationJobRecord = {
        job_id: newId(), team_id: p.team_id, status: 'queued', dataset_name: req.dataset_name, task_type: req.task_type, count: 0, num_examples: req.num_examples ?? 20,
        error: null, version_id: null, request: req as unknown as Record<string, unknown>, created_at: now, updated_at: now,
      };
      if (durable) {
        // the requester, so that the worker bills and records the inference calls as today
        const queued: QueuedJob = { ...j, principal: { kind: p.kind, user_id: p.user_id, key_id: p.key_id } };
        await store.tx((t) => t.generationJobs.put(queued));
        await send(j.job_id);
        return { job_id: j.job_id, status: j.status };
      }
      await leases.claim('generation', j.job_id, async (t) => { t.generationJobs.put(j); return j; }, () => {
        lost.add(j.job_id);
        const i = waiting.findIndex((w) => w.id === j.job_id);
        if (i >= 0) waiting.splice(i, 1);
      });
      waiting.push({ p, id: j.job_id, req });
      pump();
      return { job_id: j.job_id, status: j.status };
    },

    async get(p: Principal, id: string) {
      const j = await store.generationJobs.get(id);
      if (!j || j.team_id !== p.team_id) throw new NotFoundError(`Generation job ${id} not found`);
      return jobView(j);
    },

    /** one element per input: entities with spans, labels and confidences */
    async labelNer(p: Principal, body: { labels: string[]; inputs: string[]; model_id?: string; threshold?: number }) {
      const r = await inference.runEncoder(p, { model_id: body.model_id ?? ROUTER_MODEL_ID, text: body.inputs, schema: { entities: body.labels }, include_spans: true, include_confidence: true, threshold: body.threshold }, { endpoint: '/generate/ner/label-existing' });
      return (r.result as Array<{ entities?: Record<string, Array<{ text: string; start: number; end: number; confidence: number }>> }>).map((res, i) => ({
        text: body.inputs[i],
        entities: Object.entries(res.entities ?? {}).flatMap(([label, es]) => (Array.isArray(es) ? es : []).map((e) => ({ text: e.text, label, start: e.start, end: e.end, confidence: e.confidence }))).sort((a, b) => a.start - b.start || a.end - b.end),
      }));
    },

    /** one element per input: the predicted label and its confidence */
    async labelClassification(p: Principal, body: { labels: string[]; inputs: string[]; model_id?: string; threshold?: number }) {
      const schema = { classifications: [{ task: CLASSIFICATION_TASK, labels: body.labels }] };
      const r = await inference.runEncoder(
        p,
        {
          model_id: body.model_id ?? ROUTER_MODEL_ID, text: body.inputs, schema, include_confidence: true,
          threshold: body.threshold,
        },
        { endpoint: '/generate/classification/label-existing' },
      );
      return (r.result as Array<{ classifications?: Record<string, { label: string; confidence?: number }> }>).map((res, i) => {
        type Out = { label: string; confidence?: number } | undefined;
        const top = res as Record<string, unknown>;
        const c = res.classifications?.[CLASSIFICATION_TASK] ?? (top[CLASSIFICATION_TASK] as Out);
        return { text: body.inputs[i], label: c?.label ?? null, confidence: c?.confidence ?? null };
      });
    },

    /** at start: jobs whose process is gone (lease expired) are failed explicitly; a live process's are left alone */
    async resumePending(): Promise<void> {
      await leases.sweep('generation');
      if (durable && config.roles.has('worker')) {
        // as many handlers as the global cap; the caps themselves are counted in the store
        await durable.work('generation', config.generationConcurrency, (id) => {
          if (closing) return Promise.resolve();
          const job: Promise<void> = runQueued(id).finally(() => running.delete(job));
          running.add(job);
          return job;
        });
      }
    },

    async shutdown(): Promise<void> {
      closing = true;
      // still `queued` in the store: once the leases are released (at close), a supervisor fails them with the reason
      waiting.length = 0;
      await Promise.race([Promise.allSettled([...running]), new Promise((r) => setTimeout(r, 2000).unref())]);
    },
  };
}
export type GenerationService = ReturnType<typeof createGenerationService>;
