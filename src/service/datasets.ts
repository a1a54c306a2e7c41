// Datasets: versioned, per team and name. Upload is three steps (spec section 4):
//   1. POST /felix/datasets/upload/url → a presigned PUT URL served by Loom (HMAC-signed,
//      expiring, single use, size-limited); a new version in `initialized`
//   2. PUT <url> with the file → the version is `uploading` (file stored, waiting to be processed).
//      Crash-consistent: the file is written to a temporary, fsynced and renamed to `raw`, and only
//      then are the upload marked used and the version `uploading`, in one transaction. A server
//      killed before that commit leaves the upload unused: the same URL takes the PUT again until
//      it expires; a version whose URL expires without a file becomes `failed` with the reason.
//   3. POST /felix/datasets/upload/process → `converting` → `validating` → `ready` | `failed`
//      in the worker pool; `processing_error` names the line and the problem.
// Uploading or generating into an existing name adds a version. Files live under
// <artifacts dir>/datasets/<team>/<dataset id>/<version id>/ (LOOM_ARTIFACTS_DIR, default LOOM_DATA_DIR).
// With an S3 artifact store (src/service/artifacts) step 1's URL is a PUT presigned by the bucket
// itself: the file goes straight to the object store, and step 3 finds it there (HEAD: no object →
// 409, over LOOM_MAX_UPLOAD_BYTES → 413 and the object is deleted) before the version moves on;
// processing fetches `raw` into the local cache and uploads `data.jsonl` before the version is ready.
// On PostgreSQL (the durable queue) step 3 moves the version to `converting` without a lease (waiting)
// and enqueues it; a process with the 'worker' role takes the lease when it starts processing it.
import { createReadStream, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import type { DatasetRecord, DatasetType, DatasetVersionRecord, Store, UploadRecord } from '../store/index.ts';
import type { ArtifactStore } from './artifacts/types.ts';
import type { Principal } from './auth.ts';
import { artifactDir, type ServiceConfig } from './config.ts';
import { ConflictError, NotFoundError, PayloadTooLargeError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';
import type { Leases } from './jobs/leases.ts';
import type { JobPool } from './jobs/pool.ts';
import type { ProcessDatasetResult } from './jobs/datasets-task.ts';
import type { JobQueue } from './jobs/queue.ts';
import type { SignedUrls } from './signed-urls.ts';
import type { Logger } from './index.ts';
import { TMP_SUFFIX, writeFileDurable } from './durable.ts';

export const DATASET_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const RESERVED = new Set(['upload']);
const FILE_EXT = /\.(jsonl|ndjson|json|csv)$/i;

export const versionView = (v: DatasetVersionRecord) => ({
  id: v.id, dataset_name: v.dataset_name, version_number: v.version_number, size: v.size, status: v.status, created_at: v.created_at,
  dataset_type: v.dataset_type, processing_error: v.processing_error, source: v.source, filename: v.filename, format: v.format,
  bytes: v.bytes, labels: v.labels, kinds: v.kinds, updated_at: v.updated_at, ready_at: v.ready_at,
});

export function createDatasetsService(deps: {
  store: Store; config: ServiceConfig; pool: JobPool; urls: SignedUrls; artifacts: ArtifactStore; log?: Logger;
  /** a version being processed (or a generated one being written) holds a lease: kind 'dataset', the version id */
  leases: Leases;
  /**
   * the durable queue (PostgreSQL store): uploads are processed by processes with the 'worker' role (a
   * `converting` version without a lease waits in the queue); null: the accepting process processes them
   */
  queue?: JobQueue | null;
}) {
  const { store, config, pool, urls, artifacts, leases } = deps;
  const durable = deps.queue ?? null;
  /** a waiting version this old (since it became `converting`) is enqueued again by the supervisor */
  const RESEND_AFTER_MS = 10_000;
  const send = (id: string) => durable?.send('dataset', id)
    .catch((e) => deps.log?.warn({ version: id, err: String(e) }, 'dataset not enqueued (sent again later)'));
  /** versions whose lease this process lost: their processing here writes nothing more */
  const lost = new Set<string>();
  let closing = false;
  const root = artifactDir(config, 'datasets');
  const pending = new Set<Promise<void>>();
  /** uploads whose PUT is being written now (a second PUT to the same URL meanwhile is a 409) */
  const receiving = new Set<string>();
  /** jobs/evaluations using a dataset right now (set by the training and evaluation services) */
  const users: Array<(teamId: string, name: string) => Promise<string | null> | string | null> = [];

  const versionDir = (v: DatasetVersionRecord) => join(root, v.team_id, v.dataset_id, v.id);
  const dataFile = (v: DatasetVersionRecord) => join(versionDir(v), 'data.jsonl');
  const rawFile = (v: DatasetVersionRecord) => join(versionDir(v), 'raw');
  /** a ready version's data on this node (S3: fetched into the cache first) */
  const localDataFile = (v: DatasetVersionRecord) => artifacts.getFile(dataFile(v));

  async function own(p: Principal, name: string): Promise<DatasetRecord> {
    const d = await store.datasets.byName(p.team_id, name);
    if (!d) throw new NotFoundError(`Dataset ${name} not found`);
    return d;
  }

  async function resolveVersion(d: DatasetRecord, version: string): Promise<DatasetVersionRecord> {
    const all = await store.datasets.listVersions(d.id);
    const v = version === 'latest' ? all[0] : all.find((x) => x.version_number === version || x.id === version);
    if (!v) throw new NotFoundError(`Dataset ${d.dataset_name} has no version ${version}`);
    return v;
  }

  /** `update`, only while the version is still in state `from` */
  async function advance(id: string, from: DatasetVersionRecord['status'], patch: Partial<DatasetVersionRecord>): Promise<void> {
    await store.tx(async (t) => {
      const v = await t.datasets.getVersion(id);
      if (v?.status === from) t.datasets.putVersion({ ...v, ...patch, updated_at: nowIso() });
    });
  }

  async function update(id: string, patch: Partial<DatasetVersionRecord>): Promise<DatasetVersionRecord | undefined> {
    return store.tx(async (t) => {
      const v = await t.datasets.getVersion(id);
      if (!v) return undefined;
      const nv = { ...v, ...patch, updated_at: nowIso() };
      t.datasets.putVersion(nv);
      return nv;
    });
  }

  /** a new version of `name` (created when missing); inside one transaction */
  async function newVersion(teamId: string, name: string, type: DatasetType, fields: Partial<DatasetVersionRecord>): Promise<DatasetVersionRecord> {
    return store.tx((t) => newVersionIn(t, teamId, name, type, fields));
  }
  async function newVersionIn(
    t: Parameters<Parameters<Store['tx']>[0]>[0], teamId: string, name: string, type: DatasetType,
    fields: Partial<DatasetVersionRecord>,
  ): Promise<DatasetVersionRecord> {
    {
      const now = nowIso();
      let d = await t.datasets.byName(teamId, name);
      if (d && d.dataset_type !== type) {
        throw new ValidationError(`Dataset ${name} holds ${d.dataset_type} data; a ${type} version cannot be added to it`, [{ path: '/dataset_type', message: `must be ${d.dataset_type} for dataset ${name}` }]);
      }
      d ??= { id: newId(), team_id: teamId, dataset_name: name, dataset_type: type, next_version: 1, latest_version_id: null, created_at: now, updated_at: now };
      const v: DatasetVersionRecord = {
        id: newId(), team_id: teamId, dataset_id: d.id, dataset_name: name, dataset_type: type, version_number: String(d.next_version), size: 0,
        status: 'initialized', processing_error: null, source: 'upload', filename: null, format: null, bytes: 0, kinds: {}, labels: {},
        created_at: now, updated_at: now, ready_at: null, ...fields,
      };
      t.datasets.put({ ...d, next_version: d.next_version + 1, latest_version_id: v.id, updated_at: now });
      t.datasets.putVersion(v);
      return v;
    }
  }

  /** `from` → converting with this process's lease, in one transaction (null: not in `from` any more) */
  function claimConverting(
    id: string, from: DatasetVersionRecord['status'], patch: Partial<DatasetVersionRecord> = {},
  ) {
    return leases.claim('dataset', id, async (t) => {
      const v = await t.datasets.getVersion(id);
      if (v?.status !== from) return null;
      const nv = { ...v, ...patch, status: 'converting' as const, updated_at: nowIso() };
      t.datasets.putVersion(nv);
      return nv;
    }, () => lost.add(id));
  }

  /** queue: `from` → converting without a lease (waiting for a worker); null: not in `from` any more */
  function queueConverting(id: string, from: DatasetVersionRecord['status']) {
    return store.tx(async (t) => {
      const v = await t.datasets.getVersion(id);
      if (v?.status !== from) return null;
      const nv = { ...v, status: 'converting' as const, updated_at: nowIso() };
      t.datasets.putVersion(nv);
      return nv;
    });
  }

  /**
   * queue consumer: a waiting version (converting or validating, no lease) is processed here under this
   * process's lease; resolves when it ended here. A version that another process holds (or whose
   * orphaned lease the supervisor has not removed yet) is left alone.
   */
  async function runQueued(id: string): Promise<void> {
    const v = await leases.claim('dataset', id, async (t) => {
      const cur = await t.datasets.getVersion(id);
      if (!cur || (cur.status !== 'converting' && cur.status !== 'validating')) return null;
      if (await t.leases.get('dataset', id)) return null;
      const nv = { ...cur, status: 'converting' as const, updated_at: nowIso() };
      t.datasets.putVersion(nv);
      return nv;
    }, () => lost.add(id));
    if (v) await startProcessing(v, rawFile(v));
  }

  const EXPIRED = 'the upload URL expired before a complete file was received; request a new upload URL';
  /** an upload URL that expires unused fails its version (nothing waits in `initialized` forever) */
  function watchExpiry(u: UploadRecord): void {
    const left = Date.parse(u.expires_at) - Date.now();
    if (left > 0) {
      setTimeout(() => watchExpiry(u), Math.min(left + 1000, 2 ** 31 - 1)).unref();
      return;
    }
    void (async () => {
      // S3: the PUT went to the bucket; a file there in time is an upload (process takes it), not an expiry
      const v0 = await store.datasets.getVersion(u.version_id);
      let got = artifacts.kind === 's3' && v0 ? await artifacts.stat(rawFile(v0)) : null;
      if (got && v0 && (got.size === 0 || got.size > u.max_bytes)) {
        await artifacts.remove(versionDir(v0)); // an empty or oversized object is not kept
        got = null;
      }
      const failed = await store.tx(async (t) => {
        const cur = await t.datasets.getUpload(u.id);
        const v = cur && !cur.used_at ? await t.datasets.getVersion(cur.version_id) : undefined;
        if (v?.status !== 'initialized') return undefined;
        if (got) {
          t.datasets.putUpload({ ...cur!, used_at: nowIso() });
          t.datasets.putVersion({ ...v, status: 'uploading', bytes: got.size, updated_at: nowIso() });
          return undefined;
        }
        t.datasets.putVersion({ ...v, status: 'failed', processing_error: EXPIRED, updated_at: nowIso() });
        return v;
      });
      if (failed) removeTemporaries(failed);
    })().catch((e) => {
      // the store or the object store is down: look again later rather than fail a version whose file may be there
      deps.log?.error({ err: String(e) }, 'upload expiry check failed');
      setTimeout(() => watchExpiry(u), 30_000).unref();
    });
  }

  /**
   * S3 uploads (step 3 of a version still `initialized`): the object the client PUT to the bucket.
   * None → the version is returned as it is (409 below); too large → 413, and the object is deleted
   * (the URL takes another PUT until it expires); else the upload is used and the version `uploading`.
   */
  async function receivedInBucket(v: DatasetVersionRecord): Promise<DatasetVersionRecord> {
    const got = await artifacts.stat(rawFile(v));
    if (!got) return v;
    const u = (await store.datasets.allUploads()).find((x) => x.version_id === v.id);
    const max = u?.max_bytes ?? config.maxUploadBytes;
    if (got.size > max) {
      await artifacts.remove(versionDir(v));
      throw new PayloadTooLargeError(max);
    }
    if (got.size === 0) {
      throw new ValidationError('The uploaded file is empty', [{ path: '', message: 'empty object' }]);
    }
    return (await store.tx(async (t) => {
      const cv = await t.datasets.getVersion(v.id);
      if (!cv || cv.status !== 'initialized') return cv;
      const now = nowIso();
      const cu = u && (await t.datasets.getUpload(u.id));
      if (cu && !cu.used_at) t.datasets.putUpload({ ...cu, used_at: now });
      const nv = { ...cv, status: 'uploading' as const, bytes: got.size, updated_at: now };
      t.datasets.putVersion(nv);
      return nv;
    })) ?? v;
  }

  /** half-written upload files of a version no PUT can write any more (used, or its URL expired) */
  function removeTemporaries(v: DatasetVersionRecord): void {
    const dir = versionDir(v);
    const partial = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(TMP_SUFFIX)) : [];
    for (const f of partial) rmSync(join(dir, f), { force: true });
  }

  async function settle(timeoutMs = 10_000): Promise<void> {
    await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, timeoutMs).unref())]);
  }

  // the supervisor: a version whose processing process is gone is processed again from its file (or
  // failed when the file is gone); a generated version whose writer is gone is failed
  const takeovers = new Map<string, { v: DatasetVersionRecord; raw: string } | null>();
  const GEN_CUT = 'the server restarted while the generated examples were written';
  leases.supervise('dataset', {
    async inFlight() {
      const all = (await store.datasets.allVersions())
        .filter((v) => v.status === 'converting' || v.status === 'validating'
          || (v.source === 'generate' && v.status === 'uploading'));
      if (!durable) return all.map((v) => v.id);
      // queue: a version being processed has a lease; one without waits in the queue (a lost send is sent again)
      const held = new Set((await store.leases.listByKind('dataset')).map((l) => l.id));
      const old = Date.now() - RESEND_AFTER_MS;
      for (const v of all) {
        if (!held.has(v.id) && v.status !== 'uploading' && Date.parse(v.updated_at) < old) void send(v.id);
      }
      return all.filter((v) => held.has(v.id) || v.status === 'uploading').map((v) => v.id);
    },
    async takeOver(t, id) {
      const v = await t.datasets.getVersion(id);
      if (!v) return false;
      const raw = rawFile(v);
      if (v.source === 'generate' && v.status === 'uploading') {
        // cut off while its file was written (the generation job itself is failed by its service)
        t.datasets.putVersion({ ...v, status: 'failed', processing_error: GEN_CUT, updated_at: nowIso() });
        takeovers.set(id, null);
        return true;
      }
      if (v.status !== 'converting' && v.status !== 'validating') return false;
      // (S3: the object is fetched by the processing, which fails the version with the reason when it is gone)
      if (artifacts.kind === 'local' && !existsSync(raw)) {
        const processing_error = 'the uploaded file was lost during a server restart; upload it again';
        t.datasets.putVersion({ ...v, status: 'failed', processing_error, updated_at: nowIso() });
        takeovers.set(id, null);
        return true;
      }
      const nv = { ...v, status: 'converting' as const, updated_at: nowIso() };
      t.datasets.putVersion(nv);
      takeovers.set(id, { v: nv, raw });
      return durable ? true : 'adopt'; // queue: waiting again (no lease), enqueued below
    },
    after(id) {
      const todo = takeovers.get(id);
      takeovers.delete(id);
      if (todo && durable) void send(id);
      else if (todo) void startProcessing(todo.v, todo.raw);
      else {
        void store.datasets.getVersion(id).then((v) => {
          if (v?.source === 'generate') rmSync(versionDir(v), { recursive: true, force: true });
        });
      }
    },
    onLost: (id) => lost.add(id),
  });

  /** converting → validating → ready | failed, in the worker pool (resolves when it ended) */
  function startProcessing(v: DatasetVersionRecord, rawPath: string): Promise<void> {
    const job = (async () => {
      let r: ProcessDatasetResult;
      try {
        // S3: the uploaded object into the local cache; the processed file back to the bucket before `ready`
        let raw: string;
        try { raw = await artifacts.getFile(rawPath); } catch (e) {
          throw new Error(`the uploaded file could not be read: ${(e as Error).message}`);
        }
        mkdirSync(versionDir(v), { recursive: true });
        const { result } = pool.run<ProcessDatasetResult>(
          {
            op: 'process_dataset', raw_path: raw, out_path: dataFile(v), filename: v.filename ?? 'data.jsonl',
            dataset_type: v.dataset_type,
          },
          // progress travels on its own port and may arrive after the result: it only moves `converting` on
          (m) => { if (m?.phase === 'validating') void advance(v.id, 'converting', { status: 'validating' }); },
        );
        try { r = await result; } catch (e) {
          r = { ok: false, stage: 'converting', error: `processing crashed: ${(e as Error).message}` };
        }
        if (r.ok && !closing && !lost.has(v.id)) {
          await artifacts.putFile(dataFile(v)).catch((e) => {
            throw new Error(`the processed dataset could not be stored: ${(e as Error).message}`);
          });
        }
      } catch (e) {
        r = { ok: false, stage: 'converting', error: (e as Error).message };
      }
      if (closing || lost.has(v.id)) return; // shutting down, or taken over elsewhere: the other process decides
      if (r.ok) await update(v.id, { status: 'ready', size: r.size, kinds: r.kinds, labels: r.labels, format: r.format, processing_error: null, ready_at: nowIso() });
      else await update(v.id, { status: 'failed', processing_error: r.error });
      await leases.release('dataset', v.id);
      deps.log?.info({ dataset: v.dataset_name, version: v.version_number, ok: r.ok }, 'dataset processed');
    })().catch((e) => deps.log?.error({ err: String(e) }, 'dataset processing failed')).finally(() => {
      pending.delete(job);
      lost.delete(v.id);
    });
    pending.add(job);
    return job;
  }

  return {
    root,
    dataFile,
    localDataFile,
    /** register a check "is this dataset in use?" (returns what uses it, or null) */
    addUsageCheck(fn: (teamId: string, name: string) => Promise<string | null> | string | null) { users.push(fn); },

    async list(p: Principal) {
      const datasets = await Promise.all((await store.datasets.listByTeam(p.team_id)).map(async (d) => {
        const latest = d.latest_version_id ? await store.datasets.getVersion(d.latest_version_id) : undefined;
        return {
          dataset_name: d.dataset_name, status: latest?.status ?? 'initialized', created_at: d.created_at, version_number: latest?.version_number ?? '0',
          dataset_type: d.dataset_type, size: latest?.size ?? 0, version_count: d.next_version - 1, updated_at: d.updated_at,
        };
      }));
      return { success: true, count: datasets.length, datasets };
    },

    async versions(p: Principal, name: string) {
      const d = await own(p, name);
      const versions = (await store.datasets.listVersions(d.id)).map(versionView);
      return { success: true, dataset_name: d.dataset_name, dataset_type: d.dataset_type, count: versions.length, versions };
    },

    async version(p: Principal, name: string, version: string) {
      return { success: true, ...versionView(await resolveVersion(await own(p, name), version)) };
    },

    /** the version a job or evaluation would use (must be ready) */
    async readyVersion(teamId: string, name: string, version = 'latest'): Promise<DatasetVersionRecord> {
      const d = await store.datasets.byName(teamId, name);
      if (!d) throw new NotFoundError(`Dataset ${name} not found`);
      const v = await resolveVersion(d, version);
      if (v.status !== 'ready') {
        throw new ValidationError(`Dataset ${name} (version ${v.version_number}) is ${v.status}; it must be ready`, [{ path: '/datasets', message: `dataset ${name} is ${v.status}, not ready`, keyword: 'dataset_not_ready' }]);
      }
      return v;
    },

    /** canonical records `offset .. offset+limit` of a version (read line by line, never the whole file) */
    async preview(p: Principal, name: string, version: string, limit: number, offset: number) {
      const v = await resolveVersion(await own(p, name), version);
      if (v.status !== 'ready') throw new ConflictError(`Dataset ${name} version ${v.version_number} is ${v.status}; preview is available once it is ready`);
      const records: unknown[] = [];
      const rl = createInterface({ input: createReadStream(await localDataFile(v), 'utf8'), crlfDelay: Infinity });
      let i = 0;
      try {
        for await (const line of rl) {
          if (!line) continue;
          if (i++ < offset) continue;
          records.push(JSON.parse(line));
          if (records.length >= limit) break;
        }
      } finally { rl.close(); }
      return { success: true, dataset_name: v.dataset_name, version_number: v.version_number, total: v.size, count: records.length, offset, records };
    },

    /** the canonical JSONL file of a ready version (the route streams it) */
    async download(p: Principal, name: string, version: string): Promise<{ path: string; filename: string }> {
      const v = await resolveVersion(await own(p, name), version);
      if (v.status !== 'ready') throw new ConflictError(`Dataset ${name} version ${v.version_number} is ${v.status}; download is available once it is ready`);
      return { path: await localDataFile(v), filename: `${v.dataset_name}-v${v.version_number}.jsonl` };
    },

    async remove(p: Principal, name: string): Promise<void> {
      const d = await own(p, name);
      for (const check of users) {
        const user = await check(p.team_id, d.dataset_name);
        if (user) throw new ConflictError(`Dataset ${name} is in use by ${user}; stop or delete it first`);
      }
      await store.tx((t) => t.datasets.remove(d.id));
      await artifacts.remove(join(root, d.team_id, d.id))
        .catch((e) => deps.log?.warn({ dataset: d.id, err: String(e) }, 'dataset files not removed'));
    },

    /** step 1 */
    async createUpload(p: Principal, body: { dataset_name: string; dataset_type: DatasetType; filename: string }, baseUrl: string) {
      if (!DATASET_NAME.test(body.dataset_name) || RESERVED.has(body.dataset_name)) {
        throw new ValidationError('dataset_name must be 1-128 letters, digits, ".", "_" or "-", starting with a letter or digit (and not "upload")', [{ path: '/dataset_name', message: 'invalid dataset name' }]);
      }
      if (!FILE_EXT.test(body.filename)) {
        throw new ValidationError('filename must end in .jsonl, .ndjson, .json or .csv', [{ path: '/filename', message: 'unsupported file type' }]);
      }
      await artifacts.check(); // S3 down: 503 before a version is made that nobody could upload to
      const v = await newVersion(p.team_id, body.dataset_name, body.dataset_type, { filename: body.filename.split(/[\\/]/).pop()!, source: 'upload' });
      const uploadId = newId();
      const path = `/felix/datasets/upload/${uploadId}`;
      // S3: a PUT presigned by the bucket; else a Loom-signed URL served by the route
      const signed = (await artifacts.presignPut(rawFile(v), config.signedUrlTtlS))
        ?? urls.sign('PUT', path, config.signedUrlTtlS, baseUrl);
      const upload: UploadRecord = {
        id: uploadId, team_id: p.team_id, version_id: v.id, dataset_name: v.dataset_name, filename: v.filename!, max_bytes: config.maxUploadBytes,
        expires_at: signed.expires_at, used_at: null, created_at: nowIso(),
      };
      await store.tx((t) => t.datasets.putUpload(upload));
      watchExpiry(upload);
      return {
        success: true, upload_url: signed.url, method: 'PUT', expires_at: signed.expires_at, max_bytes: config.maxUploadBytes, upload_id: uploadId,
        dataset_name: v.dataset_name, dataset_type: v.dataset_type, version_id: v.id, version_number: v.version_number, status: v.status,
      };
    },

    /** step 2: the PUT to the presigned URL (already signature-checked) */
    async receiveUpload(uploadId: string, data: Buffer) {
      const u = await store.datasets.getUpload(uploadId);
      if (!u) throw new NotFoundError('Upload not found (the dataset may have been deleted)');
      if (u.used_at) throw new ConflictError('This upload URL has already been used: request a new one');
      if (data.byteLength > u.max_bytes) throw new PayloadTooLargeError(u.max_bytes);
      if (data.byteLength === 0) throw new ValidationError('The uploaded file is empty', [{ path: '', message: 'empty body' }]);
      const v = await store.datasets.getVersion(u.version_id);
      if (!v) throw new NotFoundError('Upload not found (the dataset may have been deleted)');
      if (receiving.has(uploadId)) throw new ConflictError('This upload URL is receiving a file right now: wait for it');
      receiving.add(uploadId);
      try {
        // the whole file on disk first (temp, fsync, rename), then the upload used + the version uploading together
        mkdirSync(versionDir(v), { recursive: true });
        await writeFileDurable(join(versionDir(v), 'raw'), data);
        const outcome = await store.tx(async (t) => {
          const cur = await t.datasets.getUpload(uploadId);
          const cv = await t.datasets.getVersion(u.version_id);
          if (!cur || !cv) return 'gone';
          if (cur.used_at) return 'used';
          if (cv.status !== 'initialized') return 'expired'; // failed by watchExpiry while this PUT was written
          const now = nowIso();
          t.datasets.putUpload({ ...cur, used_at: now });
          t.datasets.putVersion({ ...cv, status: 'uploading', bytes: data.byteLength, updated_at: now });
          return 'ok';
        });
        if (outcome === 'ok') removeTemporaries(v); // of earlier PUTs cut off by a crash
        if (outcome === 'gone') throw new NotFoundError('Upload not found (the dataset may have been deleted)');
        if (outcome === 'used') throw new ConflictError('This upload URL has already been used: request a new one');
        if (outcome === 'expired') throw new ConflictError(EXPIRED);
      } finally {
        receiving.delete(uploadId);
      }
      return { success: true, upload_id: uploadId, dataset_name: v.dataset_name, version_number: v.version_number, bytes: data.byteLength };
    },

    /** step 3 */
    async process(p: Principal, body: { dataset_name: string; upload_id?: string; version_id?: string; version_number?: string }) {
      const d = await own(p, body.dataset_name);
      let v: DatasetVersionRecord | undefined;
      if (body.upload_id) {
        const u = await store.datasets.getUpload(body.upload_id);
        if (!u || u.team_id !== p.team_id || u.dataset_name !== d.dataset_name) throw new NotFoundError(`Upload ${body.upload_id} not found`);
        v = await store.datasets.getVersion(u.version_id);
      } else if (body.version_id || body.version_number) {
        v = (await store.datasets.listVersions(d.id)).find((x) => x.id === body.version_id || x.version_number === body.version_number);
      } else {
        v = (await store.datasets.listVersions(d.id)).find((x) => x.source === 'upload' && (x.status === 'uploading' || x.status === 'initialized'));
      }
      if (!v) throw new NotFoundError(`Dataset ${body.dataset_name} has no such upload`);
      if (v.status === 'initialized' && v.source === 'upload' && artifacts.kind === 's3') v = await receivedInBucket(v);
      if (v.status === 'initialized') throw new ConflictError(`No file was uploaded for dataset ${v.dataset_name} version ${v.version_number}: PUT the file to the upload URL first`);
      if (v.status !== 'uploading') throw new ConflictError(`Dataset ${v.dataset_name} version ${v.version_number} is already ${v.status}`);
      const nv = durable ? await queueConverting(v.id, 'uploading') : await claimConverting(v.id, 'uploading');
      if (!nv) {
        throw new ConflictError(`Dataset ${v.dataset_name} version ${v.version_number} is already being processed`);
      }
      if (durable) await send(nv.id);
      else void startProcessing(nv, rawFile(nv));
      return { success: true, ...versionView(nv) };
    },

    /** a version made by the generation service from records it produced */
    async createVersionFromRecords(teamId: string, name: string, type: DatasetType, jsonl: string, filename: string): Promise<DatasetVersionRecord> {
      // the version and this process's lease together: a process that dies while writing the file
      // leaves an `uploading` version that a supervisor fails with the reason
      const id = newId();
      const fields = { id, filename, source: 'generate' as const, status: 'uploading' as const };
      const create = (t: Parameters<Parameters<Store['tx']>[0]>[0]) => newVersionIn(t, teamId, name, type, fields);
      const v = (await leases.claim('dataset', id, create, () => lost.add(id)))!;
      mkdirSync(versionDir(v), { recursive: true });
      await writeFileDurable(rawFile(v), jsonl);
      // S3: so that any node can process it again after a restart
      await artifacts.putFile(rawFile(v)).catch(async (e) => {
        const processing_error = `the generated examples could not be stored: ${(e as Error).message}`;
        await update(v.id, { status: 'failed', processing_error });
        await leases.release('dataset', v.id);
        throw e;
      });
      const nv = await update(v.id, { status: 'converting', bytes: Buffer.byteLength(jsonl) });
      if (!nv) throw new Error('the dataset was deleted while it was generated');
      void startProcessing(nv, rawFile(nv)); // here, under the lease taken above (a worker, on the queue)
      return nv;
    },

    /**
     * At start: uploads cut off before their commit keep their URL (the PUT can be sent again) and fail
     * their version when it expires (their half-written temporaries are removed then, or when a PUT
     * completes: another live process may be receiving one right now); versions being processed, or
     * generated versions being written, whose process is gone (lease expired) are taken over by the
     * supervisor (processed again from their file, or failed with the reason); those of a live
     * process are left alone.
     */
    async resumePending(): Promise<void> {
      for (const u of await store.datasets.allUploads()) {
        const v = u.used_at ? undefined : await store.datasets.getVersion(u.version_id);
        if (v?.status === 'initialized') watchExpiry(u);
      }
      await leases.sweep('dataset');
      if (durable && config.roles.has('worker')) {
        // one at a time: the pool has one dataset slot (src/service/customization.ts)
        await durable.work('dataset', 1, (id) => (closing ? Promise.resolve() : runQueued(id)));
      }
    },

    /**
     * shutdown: waits up to `timeoutMs` for processing; what is still running after that writes nothing
     * more (its lease is released at close, and the next owner processes it again)
     */
    async shutdown(timeoutMs = 2000): Promise<void> {
      await settle(timeoutMs);
      closing = true;
    },

    /** wait for background processing (tests, shutdown) */
    settle,
  };
}
export type DatasetsService = ReturnType<typeof createDatasetsService>;
