// The artifact store on S3-compatible object storage (AWS S3, MinIO, Ceph, R2, ...) through the AWS
// SDK (@aws-sdk/client-s3; credentials from the SDK's own chain: AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY, a profile, an instance role). The bucket holds the artifacts under
// `<LOOM_S3_PREFIX><key>`; the local folder is this node's cache of them (same layout).
//   files   uploaded whole with one PutObject (an object appears complete or not at all)
//   folders their files, then `<folder>/.loom-manifest.json` (name, size, ETag of each): a folder
//           without its manifest is not there yet; a fetch reads the manifest first
//   fetches into a temporary next to the target, checked against the object's size and (for
//           single-part ETags, an MD5) its content hash, then renamed into place
//   URLs    presigned by the SDK (SigV4, at most 7 days): uploads are PUT straight to the bucket
// An unreachable store (refused, timed out, 5xx, denied) is a DependencyUnavailableError (503).
import { createHash } from 'node:crypto';
import {
  createReadStream, createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync,
} from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Readable } from 'node:stream';
import {
  DeleteObjectsCommand, GetObjectCommand, HeadBucketCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { S3Config } from '../config.ts';
import { TMP_SUFFIX, tmpSibling } from '../durable.ts';
import { DependencyUnavailableError, NotFoundError } from '../errors.ts';
import { artifactKey, type ArtifactStat, type ArtifactStore } from './types.ts';

const MANIFEST = '.loom-manifest.json';
/** SigV4 presigned URLs live at most 7 days */
const MAX_TTL_S = 7 * 24 * 3600;
const RETRY_AFTER_S = 5;
/** tries of one object's upload, the waits between them PUT_BACKOFF_MS × 1, 4, 16 */
const PUT_ATTEMPTS = 4;
const PUT_BACKOFF_MS = 250;

interface Manifest { files: Array<{ path: string; size: number; etag: string | null }> }

const httpStatus = (e: unknown) => (e as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
/** no answer (refused, reset, timed out), a 5xx or 429: another attempt may succeed; a 4xx refusal will not */
const isTransient = (e: unknown) => {
  const s = httpStatus(e);
  return s === undefined || s >= 500 || s === 429;
};
const isMissing = (e: unknown) => ['NotFound', 'NoSuchKey'].includes((e as Error)?.name) || httpStatus(e) === 404;
/** a plain MD5 ETag (single-part upload), unquoted; null for multipart or absent ETags */
const md5Etag = (etag: string | undefined | null) => {
  const m = /^"?([0-9a-f]{32})"?$/i.exec(etag ?? '');
  return m ? m[1]!.toLowerCase() : null;
};

export function createS3Artifacts(root: string, cfg: S3Config): ArtifactStore {
  const client = new S3Client({
    region: cfg.region, endpoint: cfg.endpoint ?? undefined, forcePathStyle: cfg.forcePathStyle, maxAttempts: 3,
    // S3-compatible stores differ on the SDK's default CRC checksums; plain SigV4 + Content-MD5-free PUTs work on all
    requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: { connectionTimeout: 3000, requestTimeout: 60_000 },
  });
  const Bucket = cfg.bucket;
  const where = `s3://${Bucket}/${cfg.prefix}${cfg.endpoint ? ` at ${cfg.endpoint}` : ''}`;
  /** fetches in flight, by key (one download per object or folder at a time) */
  const fetching = new Map<string, Promise<string>>();
  /** background folder fetches that failed (dirIfLocal reports each once) */
  const failed = new Map<string, Error>();

  const unavailable = (e: unknown) => {
    const why = (e as Error)?.message || (e as Error)?.name || String(e);
    return new DependencyUnavailableError(`Object storage unavailable (${where}): ${why}`, RETRY_AFTER_S);
  };
  async function send<T>(fn: () => Promise<T>): Promise<T> {
    try { return await fn(); } catch (e) {
      if (e instanceof NotFoundError || e instanceof DependencyUnavailableError) throw e;
      throw unavailable(e);
    }
  }
  function keyOf(path: string): string {
    const key = artifactKey(root, path);
    if (key === null) throw new Error(`${path} is not an artifact path (under datasets/, jobs/ or evaluations/)`);
    return key;
  }
  const objectKey = (key: string) => cfg.prefix + key;
  const localOf = (stored: string) => {
    const k = artifactKey(root, stored);
    return k === null ? stored : join(root, k);
  };

  async function head(key: string): Promise<ArtifactStat | null> {
    try {
      const r = await client.send(new HeadObjectCommand({ Bucket, Key: objectKey(key) }));
      return { size: r.ContentLength ?? 0, etag: r.ETag ?? null };
    } catch (e) {
      if (isMissing(e)) return null;
      throw unavailable(e);
    }
  }

  /** file → object; a transient failure is tried again on a fresh stream (the SDK's own retries cannot rewind a
   * stream they have read from), up to PUT_ATTEMPTS times. A read error of the file (removed before it is opened)
   * fails the upload with that error: the SDK pipes the stream without listening for one, so it would otherwise end
   * the process, and the request would wait for a body that never ends. */
  async function put(key: string, file: string): Promise<string | null> {
    const size = statSync(file).size;
    for (let attempt = 1; ; attempt++) {
      const Body = createReadStream(file);
      const abort = new AbortController();
      let readError: Error | null = null;
      Body.on('error', (e) => {
        readError ??= e;
        abort.abort();
      });
      try {
        const cmd = new PutObjectCommand({ Bucket, Key: objectKey(key), Body, ContentLength: size });
        const r = await client.send(cmd, { abortSignal: abort.signal });
        return r.ETag ?? null;
      } catch (e) {
        if (readError) throw readError;
        if (attempt >= PUT_ATTEMPTS || !isTransient(e)) throw unavailable(e);
        await sleep(PUT_BACKOFF_MS * 4 ** (attempt - 1));
      } finally {
        Body.destroy();
      }
    }
  }

  /** object → `target`, through a temporary, checked by size and MD5 ETag */
  async function download(key: string, target: string, expect?: { size: number; etag: string | null }): Promise<void> {
    let r;
    try { r = await client.send(new GetObjectCommand({ Bucket, Key: objectKey(key) })); } catch (e) {
      if (isMissing(e)) throw new NotFoundError(`${key} is not in the object store (${where})`);
      throw unavailable(e);
    }
    mkdirSync(dirname(target), { recursive: true });
    const tmp = tmpSibling(target);
    const hash = createHash('md5');
    let n = 0;
    try {
      await pipeline(r.Body as Readable, async function* (src: AsyncIterable<Buffer>) {
        for await (const chunk of src) { hash.update(chunk); n += chunk.length; yield chunk; }
      }, createWriteStream(tmp));
      const size = expect?.size ?? r.ContentLength;
      const etag = md5Etag(expect?.etag ?? r.ETag);
      if (size !== undefined && n !== size) throw new Error(`${key}: received ${n} of ${size} bytes`);
      if (etag && hash.digest('hex') !== etag) throw new Error(`${key}: content does not match its ETag`);
      renameSync(tmp, target);
    } catch (e) {
      rmSync(tmp, { force: true });
      throw e instanceof NotFoundError || e instanceof DependencyUnavailableError ? e : unavailable(e);
    }
  }

  /** one fetch per key at a time */
  function once(key: string, fn: () => Promise<string>): Promise<string> {
    let p = fetching.get(key);
    if (!p) {
      p = fn().finally(() => fetching.delete(key));
      fetching.set(key, p);
    }
    return p;
  }

  function listFiles(dir: string): string[] {
    const out: string[] = [];
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) out.push(...listFiles(p));
      else if (e.isFile() && !e.name.endsWith(TMP_SUFFIX)) out.push(p);
    }
    return out;
  }

  /** the key of a path to fetch; a missing non-artifact path (a base model not on this node) is a 404 */
  function fetchKey(stored: string): string {
    const key = artifactKey(root, stored);
    if (key === null) throw new NotFoundError(`${stored} is not on this node`);
    return key;
  }

  async function getDir(stored: string): Promise<string> {
    const local = localOf(stored);
    if (existsSync(local)) return local;
    const key = fetchKey(stored);
    return once(key, async () => {
      const m = await head(`${key}/${MANIFEST}`);
      if (!m) throw new NotFoundError(`${key} is not in the object store (${where})`);
      // the folder is fetched beside its place and renamed in whole: a local folder is a complete one
      const tmp = tmpSibling(local);
      try {
        const manifestFile = join(tmp, MANIFEST);
        await download(`${key}/${MANIFEST}`, manifestFile);
        let manifest: Manifest;
        try { manifest = JSON.parse(readFileSync(manifestFile, 'utf8')); } catch (e) {
          throw unavailable(new Error(`${key}: unreadable manifest (${(e as Error).message})`));
        }
        rmSync(manifestFile);
        for (const f of manifest.files) await download(`${key}/${f.path}`, join(tmp, f.path), f);
        mkdirSync(dirname(local), { recursive: true });
        renameSync(tmp, local);
      } catch (e) {
        rmSync(tmp, { recursive: true, force: true });
        if (existsSync(local)) return local; // another process of this node fetched it meanwhile
        throw e;
      }
      return local;
    });
  }

  return {
    kind: 's3',
    root,
    localPath: localOf,

    async putFile(path) { await put(keyOf(path), path); },

    async putDir(dir) {
      const key = keyOf(dir);
      const files: Manifest['files'] = [];
      for (const f of listFiles(dir)) {
        const rel = relative(dir, f).split('\\').join('/');
        files.push({ path: rel, size: statSync(f).size, etag: await put(`${key}/${rel}`, f) });
      }
      const body = JSON.stringify({ files } satisfies Manifest);
      const Key = objectKey(`${key}/${MANIFEST}`);
      await send(() => client.send(new PutObjectCommand({ Bucket, Key, Body: body, ContentType: 'application/json' })));
    },

    async getFile(stored) {
      const local = localOf(stored);
      if (existsSync(local)) return local;
      const key = fetchKey(stored);
      return once(key, async () => { await download(key, local); return local; });
    },

    getDir,

    dirIfLocal(stored) {
      const local = localOf(stored);
      if (existsSync(local)) return local;
      const key = artifactKey(root, stored);
      if (key === null) return local; // not an artifact: the runtime answers for it
      const err = failed.get(key);
      if (err) { failed.delete(key); throw err; }
      if (!fetching.has(key)) getDir(stored).catch((e: Error) => failed.set(key, e));
      return null;
    },

    async hasDir(stored) {
      if (existsSync(localOf(stored))) return true;
      const key = artifactKey(root, stored);
      return key !== null && (await head(`${key}/${MANIFEST}`)) !== null;
    },

    stat: (path) => head(keyOf(path)),

    async remove(dir) {
      rmSync(localOf(dir), { recursive: true, force: true });
      const prefix = objectKey(keyOf(dir)) + '/';
      let token: string | undefined;
      do {
        const list = new ListObjectsV2Command({ Bucket, Prefix: prefix, ContinuationToken: token });
        const page = await send(() => client.send(list));
        const keys = (page.Contents ?? []).map((o) => ({ Key: o.Key! }));
        const del = new DeleteObjectsCommand({ Bucket, Delete: { Objects: keys, Quiet: true } });
        if (keys.length) await send(() => client.send(del));
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
    },

    async presignPut(path, ttlS) {
      const expiresIn = Math.max(1, Math.min(MAX_TTL_S, Math.floor(ttlS)));
      const cmd = new PutObjectCommand({ Bucket, Key: objectKey(keyOf(path)) });
      const url = await getSignedUrl(client, cmd, { expiresIn });
      return { url, expires_at: new Date(Date.now() + expiresIn * 1000).toISOString() };
    },

    async presignGet(path, ttlS, filename) {
      const expiresIn = Math.max(1, Math.min(MAX_TTL_S, Math.floor(ttlS)));
      const disposition = `attachment; filename="${basename(filename).replace(/"/g, '')}"`;
      const Key = objectKey(keyOf(path));
      const cmd = new GetObjectCommand({ Bucket, Key, ResponseContentDisposition: disposition });
      const url = await getSignedUrl(client, cmd, { expiresIn });
      return { url, expires_at: new Date(Date.now() + expiresIn * 1000).toISOString() };
    },

    async check() { await send(() => client.send(new HeadBucketCommand({ Bucket }))); },

    close() { client.destroy(); },
  };
}
