// Where models live, and downloading them from the Hugging Face Hub.
//
// resolveModel(id) looks in, in order: an absolute/relative directory path; LOOM_MODELS_DIR (default
// ./models) as `<dir>/<org>/<name>`, `<dir>/<org>--<name>` or `<dir>/<name>`; the HF cache
// (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`) as
// `models--<org>--<name>/snapshots/<rev>/` with `refs/main` naming the revision. A model is "local" when its
// folder has config.json. Otherwise it is "pullable" when it is in the curated list (or any org/name when
// LOOM_ALLOW_ANY_PULL=1), else "unknown".
//
// pullModel(repo) downloads into the HF cache layout from `HF_ENDPOINT` (default https://huggingface.co),
// with `HF_TOKEN` as a bearer token: file list from `/api/models/{repo}/revision/{rev}` (siblings, with
// `?blobs=true` sizes and lfs.sha256), files from `/{repo}/resolve/{commit}/{file}` into
// `blobs/<etag>` via `blobs/<etag>.incomplete` (resumed with Range), size and sha256 checked (LFS files), then
// linked into `snapshots/<commit>/<file>` and `refs/<revision>` written.
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync, readdirSync, unlinkSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';

export type ResolvedModel = { status: 'local'; dir: string } | { status: 'pullable'; repo: string } | { status: 'unknown' };

/** Checkpoints Loom knows how to run and may pull on demand. */
export const KNOWN_MODELS: readonly string[] = [
  'fastino/gliner2-base-v1',
  'fastino/gliner2-large-v1',
  'fastino/gliner2-multi-v1',
  'HuggingFaceTB/SmolLM2-135M-Instruct',
  'HuggingFaceTB/SmolLM2-360M-Instruct',
  'Qwen/Qwen2.5-0.5B-Instruct',
  'Qwen/Qwen2.5-1.5B-Instruct',
  'meta-llama/Llama-3.2-1B-Instruct',
];

export class HubError extends Error {
  override name = 'HubError';
  constructor(message: string, readonly status?: number) {
    super(message);
  }
}

export function modelsDir(): string {
  return resolve(process.env.LOOM_MODELS_DIR ?? './models');
}

export function hfHubCache(): string {
  if (process.env.HF_HUB_CACHE) return resolve(process.env.HF_HUB_CACHE); // empty = unset
  if (process.env.HF_HOME) return join(resolve(process.env.HF_HOME), 'hub');
  return join(homedir(), '.cache', 'huggingface', 'hub');
}

const REPO_RE = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

function isModelDir(d: string): boolean {
  return existsSync(join(d, 'config.json'));
}

/** The snapshot folder of `repo` in the HF cache (refs/main, else the newest snapshot), or undefined. */
export function cachedSnapshot(repo: string, revision = 'main', cache = hfHubCache()): string | undefined {
  const base = join(cache, `models--${repo.replace('/', '--')}`);
  if (!existsSync(base)) return undefined;
  let rev = revision;
  const ref = join(base, 'refs', revision);
  if (existsSync(ref)) rev = readFileSync(ref, 'utf8').trim();
  const snap = join(base, 'snapshots', rev);
  if (existsSync(snap) && isModelDir(snap)) return snap;
  const snaps = join(base, 'snapshots');
  if (revision !== 'main' || !existsSync(snaps)) return undefined;
  const all = readdirSync(snaps).map((d) => join(snaps, d)).filter(isModelDir);
  all.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return all[0];
}

export function resolveModel(id: string): ResolvedModel {
  if (!id || typeof id !== 'string') return { status: 'unknown' };
  if ((isAbsolute(id) || id.startsWith('.')) && isModelDir(id)) return { status: 'local', dir: resolve(id) };
  const md = modelsDir();
  const parts = id.split('/');
  const candidates = [join(md, ...parts), join(md, id.replace('/', '--')), join(md, parts[parts.length - 1])];
  for (const c of candidates) if (isModelDir(c)) return { status: 'local', dir: c };
  if (REPO_RE.test(id)) {
    const snap = cachedSnapshot(id);
    if (snap) return { status: 'local', dir: snap };
  }
  const known = KNOWN_MODELS.find((k) => k.toLowerCase() === id.toLowerCase());
  if (known) return { status: 'pullable', repo: known };
  if (REPO_RE.test(id) && process.env.LOOM_ALLOW_ANY_PULL === '1') return { status: 'pullable', repo: id };
  return { status: 'unknown' };
}

export interface PullProgress {
  file: string;
  /** bytes of this file done / total */
  fileBytes: number;
  fileTotal: number;
  /** bytes over all files done / total */
  bytes: number;
  total: number;
  filesDone: number;
  files: number;
}

export interface PullOptions {
  revision?: string;
  onProgress?: (p: PullProgress) => void;
  signal?: AbortSignal;
  /** Only files matching (default: everything except other weight formats when safetensors exist). */
  include?: (file: string) => boolean;
  endpoint?: string;
  token?: string;
  cacheDir?: string;
}

interface Sibling {
  rfilename: string;
  size?: number;
  lfs?: { sha256?: string; size?: number };
}

const SKIP = /\.(bin|pt|pth|h5|msgpack|onnx|ot|gguf|ckpt)$|^(onnx|openvino|coreml|tf|flax)\//;

function headers(token?: string, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': 'loom/0.1', ...extra };
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/** Downloads `repo` (at `revision`) into the HF cache layout; returns the snapshot directory. */
export async function pullModel(repo: string, opts: PullOptions = {}): Promise<string> {
  if (!REPO_RE.test(repo)) throw new HubError(`"${repo}" is not a Hub repository id (org/name)`);
  const endpoint = (opts.endpoint ?? process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/$/, '');
  const token = opts.token ?? process.env.HF_TOKEN ?? process.env.HUGGING_FACE_HUB_TOKEN;
  const revision = opts.revision ?? 'main';
  const cache = opts.cacheDir ?? hfHubCache();
  const base = join(cache, `models--${repo.replace('/', '--')}`);
  const signal = opts.signal;

  const infoUrl = `${endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}?blobs=true`;
  let res: Response;
  try {
    res = await fetch(infoUrl, { headers: headers(token), signal });
  } catch (e) {
    if (signal?.aborted) throw new HubError('download aborted');
    throw new HubError(`cannot reach ${endpoint}: ${(e as Error).message}`);
  }
  if (res.status === 401 || res.status === 403) throw new HubError(`${repo}: access denied (${res.status}); set HF_TOKEN for gated or private models`, res.status);
  if (res.status === 404) throw new HubError(`${repo}@${revision}: not found on ${endpoint}`, 404);
  if (!res.ok) throw new HubError(`${repo}: model info request failed with HTTP ${res.status}`, res.status);
  const info = (await res.json()) as { sha?: string; siblings?: Sibling[] };
  const commit = info.sha ?? revision;
  const siblings = (info.siblings ?? []).filter((s) => (opts.include ? opts.include(s.rfilename) : !SKIP.test(s.rfilename)));
  if (siblings.length === 0) throw new HubError(`${repo}: no files to download`);
  const total = siblings.reduce((a, s) => a + (s.lfs?.size ?? s.size ?? 0), 0);
  let doneBytes = 0, filesDone = 0;
  const snapDir = join(base, 'snapshots', commit);
  mkdirSync(join(base, 'blobs'), { recursive: true });
  mkdirSync(snapDir, { recursive: true });

  for (const s of siblings) {
    const file = s.rfilename;
    if (file.includes('..') || isAbsolute(file)) throw new HubError(`${repo}: refusing unsafe file name ${file}`);
    const target = join(snapDir, file);
    const expectSize = s.lfs?.size ?? s.size;
    const expectSha = s.lfs?.sha256;
    if (existsSync(target) && (expectSize === undefined || statSync(target).size === expectSize)) {
      doneBytes += expectSize ?? statSync(target).size;
      filesDone++;
      opts.onProgress?.({ file, fileBytes: expectSize ?? 0, fileTotal: expectSize ?? 0, bytes: doneBytes, total, filesDone, files: siblings.length });
      continue;
    }
    const url = `${endpoint}/${repo}/resolve/${encodeURIComponent(commit)}/${file.split('/').map(encodeURIComponent).join('/')}`;
    // blob name: the LFS sha256, else a hash of repo+commit+file (the server's etag is only known after HEAD)
    const blobName = expectSha ?? createHash('sha256').update(`${repo}\0${commit}\0${file}`).digest('hex');
    const blob = join(base, 'blobs', blobName);
    const partial = `${blob}.incomplete`;
    if (!existsSync(blob)) {
      let have = existsSync(partial) ? statSync(partial).size : 0;
      if (expectSize !== undefined && have > expectSize) { rmSync(partial); have = 0; }
      const dl = await fetchWithResume(url, token, have, signal);
      if (dl.status === 416 && expectSize !== undefined && have === expectSize) {
        // already complete
      } else {
        const append = dl.status === 206;
        if (!append) have = 0;
        const fileTotal = expectSize ?? (Number(dl.headers.get('content-length') ?? 0) + have);
        const linked = dl.headers.get('x-linked-etag') ?? dl.headers.get('etag');
        const ws = createWriteStream(partial, { flags: append ? 'a' : 'w' });
        let got = have;
        try {
          const reader = dl.body!.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            if (!ws.write(value)) await new Promise<void>((r) => ws.once('drain', () => r()));
            got += value.byteLength;
            opts.onProgress?.({ file, fileBytes: got, fileTotal, bytes: doneBytes + got, total, filesDone, files: siblings.length });
          }
        } catch (e) {
          await new Promise<void>((r) => ws.end(() => r()));
          if (signal?.aborted) throw new HubError(`download aborted (${file}: ${got} bytes kept for resume)`);
          throw new HubError(`${file}: transfer interrupted after ${got} bytes (${(e as Error).message}); run again to resume`);
        }
        await new Promise<void>((r, j) => ws.end((err?: Error | null) => (err ? j(err) : r())));
        void linked;
      }
      const size = statSync(partial).size;
      if (expectSize !== undefined && size !== expectSize) {
        if (size > expectSize) rmSync(partial);
        throw new HubError(`${file}: size ${size} does not match the expected ${expectSize}${size > expectSize ? ' (discarded)' : '; run again to resume'}`);
      }
      if (expectSha) {
        const sha = await sha256File(partial);
        if (sha !== expectSha) {
          rmSync(partial);
          throw new HubError(`${file}: sha256 mismatch (got ${sha}, expected ${expectSha}); the partial file was discarded`);
        }
      }
      renameSync(partial, blob);
    }
    mkdirSync(dirname(target), { recursive: true });
    if (existsSync(target)) unlinkSync(target);
    try {
      symlinkSync(relative(dirname(target), blob), target);
    } catch {
      writeFileSync(target, readFileSync(blob)); // filesystems without symlinks
    }
    doneBytes += expectSize ?? statSync(blob).size;
    filesDone++;
    opts.onProgress?.({ file, fileBytes: expectSize ?? 0, fileTotal: expectSize ?? 0, bytes: doneBytes, total, filesDone, files: siblings.length });
  }
  mkdirSync(join(base, 'refs'), { recursive: true });
  writeFileSync(join(base, 'refs', revision), commit);
  return snapDir;
}

async function fetchWithResume(url: string, token: string | undefined, have: number, signal?: AbortSignal): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { headers: headers(token, have > 0 ? { range: `bytes=${have}-` } : {}), signal, redirect: 'follow' });
  } catch (e) {
    if (signal?.aborted) throw new HubError('download aborted');
    throw new HubError(`${url}: ${(e as Error).message}`);
  }
  if (res.status === 416) return res;
  if (res.status === 401 || res.status === 403) throw new HubError(`${url}: access denied (${res.status}); set HF_TOKEN`, res.status);
  if (!res.ok) throw new HubError(`${url}: HTTP ${res.status}`, res.status);
  return res;
}
