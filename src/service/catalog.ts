// The model catalog: models on disk (from the runtime) + a curated list of well-known checkpoints
// that can be pulled on demand + entries from a catalog file (LOOM_CATALOG_FILE), which may add
// models or override any field of a curated/local one (pricing, caching family, blocked regions...).
// A team's own fine-tuned models (complete or deployed training jobs) are listed for that team only
// (`listForTeam`): id = the job id, pricing, caching family, context and regions of the base they were trained on.
import { readFileSync } from 'node:fs';
import { onCommit, type Store, type TrainingJobRecord } from '../store/index.ts';
import type { CachingFamily, Pricing } from './billing.ts';
import type { LocalModel, ModelKind, ModelRuntime, ModelStatus } from './runtime.ts';
import { NotFoundError } from './errors.ts';

export interface CatalogEntry {
  id: string;
  name: string;
  task_type: ModelKind;
  description: string;
  /** can be called for inference (false: a training-only base → 409) */
  supports_inference: boolean;
  /** can be pulled/loaded on demand when not on disk (425 while warming) */
  supports_on_demand_inference: boolean;
  supports_training: boolean;
  /**
   * `training_algorithm` dpo / grpo accepted (LoRA): decoders the runtime serves (the Llama family:
   * Llama 2/3, Qwen2, Mistral, SmolLM), verified by the RL tests; encoders have no token log-probabilities
   */
  supports_rl: boolean;
  caching_family: CachingFamily;
  /** credits per 1M tokens */
  pricing: Pricing;
  context_length: number | null;
  /** on disk now */
  local: boolean;
  /** Hugging Face repository the weights come from */
  hf_repo: string | null;
  /** ISO 3166-1 alpha-2 regions where the model may not be served (451) */
  blocked_regions: string[];
  source: 'local' | 'curated' | 'catalog_file' | 'fine_tuned';
  provider: string;
  /** fine-tuned models: the catalog model they were trained from, and when the training finished (ISO 8601) */
  base_model?: string;
  created_at?: string;
}

export { ROUTER_MODEL_ID } from './router.ts';

type Curated = Omit<CatalogEntry, 'local' | 'source' | 'description' | 'blocked_regions' | 'supports_training' | 'supports_rl' | 'hf_repo'> & Partial<CatalogEntry>;

const ENC: Pick<CatalogEntry, 'task_type' | 'caching_family' | 'supports_training'> = { task_type: 'encoder', caching_family: 'none', supports_training: true };
const DEC: Pick<CatalogEntry, 'task_type' | 'caching_family' | 'supports_training'> = { task_type: 'decoder', caching_family: 'automatic_half', supports_training: true };

export const FRESH_ENCODER_ID = 'loom/gliner2-init-small';
/** training-only bases created fresh from a preset (no pretrained weights offline): id → encoder preset */
export const FRESH_ENCODERS: Record<string, string> = { [FRESH_ENCODER_ID]: 'small', 'loom/gliner2-init-tiny': 'tiny' };

/** Curated checkpoints (ids are Hugging Face repositories). Prices in credits per 1M tokens. */
export const CURATED: Curated[] = [
  { id: 'fastino/gliner2-base-v1', name: 'GLiNER2 base', ...ENC, supports_inference: true, supports_on_demand_inference: true, pricing: { input: 2, output: 0 }, context_length: 2048, provider: 'fastino' },
  { id: 'fastino/gliner2-large-v1', name: 'GLiNER2 large', ...ENC, supports_inference: true, supports_on_demand_inference: true, pricing: { input: 5, output: 0 }, context_length: 2048, provider: 'fastino' },
  { id: 'fastino/gliner2-multi-v1', name: 'GLiNER2 multilingual', ...ENC, supports_inference: true, supports_on_demand_inference: true, pricing: { input: 4, output: 0 }, context_length: 2048, provider: 'fastino' },
  { id: 'HuggingFaceTB/SmolLM2-135M-Instruct', name: 'SmolLM2 135M Instruct', ...DEC, supports_inference: true, supports_on_demand_inference: true, pricing: { input: 2, output: 4 }, context_length: 8192, provider: 'huggingface' },
  { id: 'HuggingFaceTB/SmolLM2-360M-Instruct', name: 'SmolLM2 360M Instruct', ...DEC, supports_inference: true, supports_on_demand_inference: true, pricing: { input: 4, output: 8 }, context_length: 8192, provider: 'huggingface' },
  { id: 'Qwen/Qwen2.5-0.5B-Instruct', name: 'Qwen2.5 0.5B Instruct', ...DEC, caching_family: 'automatic_tenth', supports_inference: true, supports_on_demand_inference: true, pricing: { input: 5, output: 10 }, context_length: 32768, provider: 'qwen' },
  { id: 'Qwen/Qwen2.5-1.5B-Instruct', name: 'Qwen2.5 1.5B Instruct', ...DEC, caching_family: 'automatic_tenth', supports_inference: true, supports_on_demand_inference: true, pricing: { input: 15, output: 30 }, context_length: 32768, provider: 'qwen' },
  { id: 'meta-llama/Llama-3.2-1B-Instruct', name: 'Llama 3.2 1B Instruct', ...DEC, caching_family: 'explicit', supports_inference: true, supports_on_demand_inference: true, pricing: { input: 10, output: 20 }, context_length: 131072, provider: 'meta' },
  // training-only bases: fresh-initialized GLiNER2 encoders (`loom init-encoder`), one per preset
  ...Object.entries(FRESH_ENCODERS).map(([id, preset]): Curated => ({
    id, name: `GLiNER2 ${preset} (fresh init, training only)`, ...ENC,
    supports_inference: false, supports_on_demand_inference: false,
    pricing: { input: 1, output: 0 }, context_length: 512, provider: 'loom',
  })),
];

const DEFAULT_PRICING: Record<ModelKind, Pricing> = { encoder: { input: 1, output: 0 }, decoder: { input: 2, output: 4 } };

/** DPO / GRPO need a trainable decoder (LoRA on the native decoder graph). */
export function supportsRl(e: Pick<CatalogEntry, 'task_type' | 'supports_training'>): boolean {
  return e.task_type === 'decoder' && e.supports_training;
}

export interface CatalogFilter { supports_inference?: boolean; task_type?: ModelKind }

/** teams whose fine-tuned entries are cached at once (past it the cache starts again) */
const MAX_CACHED_TEAMS = 10_000;

const servable = (j: TrainingJobRecord) => j.status === 'complete' || j.status === 'deployed';

/** A complete or deployed training job as its team's catalog entry (null: not servable). */
export function fineTunedEntry(j: TrainingJobRecord, base: CatalogEntry | undefined): CatalogEntry | null {
  if (!servable(j)) return null;
  const baseId = (j.base as { catalog_id?: string } | undefined)?.catalog_id ?? j.base_model;
  const algo = typeof j.training_algorithm === 'string' ? ` ${j.training_algorithm}` : '';
  return {
    id: j.id, name: j.model_name, task_type: j.task_type,
    description: `${j.model_name}: fine-tuned from ${baseId} (${j.training_type}${algo})`,
    supports_inference: true, supports_on_demand_inference: true, supports_training: true,
    supports_rl: j.task_type === 'decoder' && (base?.supports_rl ?? true),
    caching_family: base?.caching_family ?? (j.task_type === 'decoder' ? 'automatic_half' : 'none'),
    pricing: base?.pricing ?? DEFAULT_PRICING[j.task_type], context_length: base?.context_length ?? null,
    local: true, hf_repo: null, blocked_regions: base?.blocked_regions ?? [], source: 'fine_tuned', provider: 'team',
    base_model: baseId, created_at: String(j.completed_at ?? j.updated_at),
  };
}

function matches(e: CatalogEntry, filter: CatalogFilter): boolean {
  return (filter.supports_inference === undefined || e.supports_inference === filter.supports_inference) &&
    (filter.task_type === undefined || e.task_type === filter.task_type);
}

export function createCatalog(opts: { runtime: ModelRuntime; catalogFile: string | null; store?: Store }) {
  let fileEntries: Partial<CatalogEntry>[] = [];
  if (opts.catalogFile) {
    const parsed = JSON.parse(readFileSync(opts.catalogFile, 'utf8'));
    fileEntries = Array.isArray(parsed) ? parsed : parsed.models ?? [];
  }
  let entries = new Map<string, CatalogEntry>();
  let refreshedAt = 0;
  let localSig: string | null = null;
  /** every entry, in listing order; the same array until the catalog changes (do not mutate) */
  let listed: CatalogEntry[] | null = null;
  let refreshing: Promise<void> | null = null;
  // each team's fine-tuned entries (a scan of its training jobs), kept until this process commits a
  // write (every training job is written by the server process; `loom admin` writes none), the
  // catalog changes, or a second passes (as the catalog's own rescan): GET /v1/models and
  // /base-models read them on every call
  const ownCache = new Map<string, { at: number; entries: Map<string, CatalogEntry>; list: CatalogEntry[] }>();
  if (opts.store) onCommit(opts.store.db, () => { ownCache.clear(); });

  function build(local: LocalModel[]): Map<string, CatalogEntry> {
    const m = new Map<string, CatalogEntry>();
    for (const c of CURATED) {
      m.set(c.id, { description: c.name, blocked_regions: [], hf_repo: c.id, ...c, local: false, source: 'curated' } as CatalogEntry);
    }
    for (const l of local) {
      const cur = m.get(l.id);
      const gguf = l.dir.endsWith('.gguf');  // served, not trained: the trainers read Hugging Face folders
      m.set(l.id, cur ? { ...cur, local: true } : {
        id: l.id, name: l.id, task_type: l.kind, description: `${l.architecture ?? l.kind} model on disk`,
        supports_inference: true, supports_on_demand_inference: true, supports_training: !gguf,
        supports_rl: l.kind === 'decoder' && !gguf,
        caching_family: l.kind === 'decoder' ? 'automatic_half' : 'none', pricing: DEFAULT_PRICING[l.kind],
        context_length: l.context_length ?? null, local: true, hf_repo: null, blocked_regions: [], source: 'local', provider: 'local',
      });
    }
    for (const f of fileEntries) {
      if (!f.id) continue;
      const cur = m.get(f.id);
      const kind = (f.task_type ?? cur?.task_type ?? 'decoder') as ModelKind;
      m.set(f.id, {
        name: f.id, description: f.id, supports_inference: true, supports_on_demand_inference: false, supports_training: true,
        caching_family: kind === 'decoder' ? 'automatic_half' : 'none', pricing: DEFAULT_PRICING[kind], context_length: null,
        local: false, hf_repo: null, provider: 'custom',
        ...cur, ...f, task_type: kind, source: cur?.source ?? 'catalog_file',
        blocked_regions: (f.blocked_regions ?? cur?.blocked_regions ?? []).map((r) => r.toUpperCase()),
      } as CatalogEntry);
    }
    // supports_rl follows the kind and supports_training unless the catalog file sets it
    const explicit = new Set(fileEntries.filter((f) => typeof f.supports_rl === 'boolean').map((f) => f.id));
    for (const e of m.values()) if (!explicit.has(e.id)) e.supports_rl = supportsRl(e);
    return m;
  }

  async function refresh(): Promise<void> {
    if (!refreshing) {
      refreshing = opts.runtime.listLocal().then((local) => {
        // an unchanged scan keeps the same entries (and the same list() array, which callers may memoize on)
        const sig = JSON.stringify(local);
        if (sig !== localSig) { localSig = sig; entries = build(local); listed = null; }
        refreshedAt = Date.now();
      }).finally(() => { refreshing = null; });
    }
    return refreshing;
  }

  /** the team's fine-tuned entries, read from the store (oldest first) and cached */
  async function readFineTuned(teamId: string): Promise<CatalogEntry[]> {
    const at = Date.now();
    const seen = entries;
    const jobs = (await opts.store?.trainingJobs.listByTeam(teamId)) ?? [];
    const list: CatalogEntry[] = [];
    for (const j of jobs) {
      const baseId = (j.base as { catalog_id?: string } | undefined)?.catalog_id ?? j.base_model;
      const e = fineTunedEntry(j, seen.get(baseId));
      if (e) list.push(e);
    }
    list.sort((x, y) => x.created_at!.localeCompare(y.created_at!));
    if (ownCache.size >= MAX_CACHED_TEAMS) ownCache.clear();
    ownCache.set(teamId, { at, entries: seen, list });
    return list;
  }
  function pick(list: CatalogEntry[], filter?: CatalogFilter): CatalogEntry[] {
    const all = filter === undefined || (filter.supports_inference === undefined && filter.task_type === undefined);
    return all ? list : list.filter((e) => matches(e, filter));
  }

  return {
    refresh,
    /** refreshed at most once a second (directory scan) */
    async list(filter: CatalogFilter = {}): Promise<CatalogEntry[]> {
      if (Date.now() - refreshedAt > 1000) await refresh();
      if (filter.supports_inference === undefined && filter.task_type === undefined) return listed ??= [...entries.values()];
      return [...entries.values()].filter((e) => matches(e, filter));
    },
    /**
     * The team's fine-tuned models (complete or deployed jobs, oldest first); [] without a store.
     * Unfiltered, the same array until the team's jobs or the catalog change (do not mutate). A value
     * while cached (no promise on the request path), else a promise of the store's answer.
     */
    fineTuned(teamId: string, filter?: CatalogFilter): CatalogEntry[] | Promise<CatalogEntry[]> {
      const c = ownCache.get(teamId);
      if (c === undefined || c.entries !== entries || Date.now() - c.at > 1000) {
        return (async () => (pick(await readFineTuned(teamId), filter)))();
      }
      return pick(c.list, filter);
    },
    /** GET /base-models: the catalog, then the caller's team's fine-tuned models (never another team's). */
    async listForTeam(teamId: string, filter: CatalogFilter = {}): Promise<CatalogEntry[]> {
      const all = await this.list(filter);
      const own = await this.fineTuned(teamId, filter);
      return own.length ? [...all, ...own] : all;
    },
    /** the unfiltered listing of list() while it is fresh (scanned under a second ago), else null */
    fresh(): CatalogEntry[] | null {
      return Date.now() - refreshedAt > 1000 ? null : (listed ??= [...entries.values()]);
    },
    async get(id: string): Promise<CatalogEntry | undefined> {
      if (!entries.has(id) || Date.now() - refreshedAt > 1000) await refresh();
      return entries.get(id);
    },
    /** GET /models/state: where a catalog model stands on this server (ready, warming with progress 0..1, pullable) */
    async state(id: string): Promise<{ model_id: string } & ModelStatus> {
      const e = await this.get(id);
      if (!e) throw new NotFoundError(`Model ${id} not found`);
      return { model_id: id, ...opts.runtime.status({ id, kind: e.task_type }) };
    },
    /** POST /models/pull: starts pulling and loading a catalog model before its first call (idempotent) */
    async pull(id: string, log?: { warn(o: object, m: string): void }): Promise<{ model_id: string } & ModelStatus> {
      const e = await this.get(id);
      if (!e) throw new NotFoundError(`Model ${id} not found`);
      const ref = { id, kind: e.task_type };
      const st = opts.runtime.status(ref);
      if (st.state === 'pullable') {
        opts.runtime.warm(ref).catch((err) => log?.warn({ model: id, err: String(err) }, 'model pull failed'));
      }
      return { model_id: id, ...opts.runtime.status(ref) };
    },
  };
}
export type Catalog = ReturnType<typeof createCatalog>;
