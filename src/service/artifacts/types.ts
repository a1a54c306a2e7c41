// The artifact store's interface and key rule (a leaf: the implementations import it). See index.ts.
import type { ModelRef } from '../runtime.ts';
export interface ArtifactStat { size: number; etag: string | null }

export interface ArtifactStore {
  readonly kind: 'local' | 's3';
  /** this node's folder: the artifacts themselves (local) or its cache of the bucket (s3) */
  readonly root: string;
  /**
   * This node's path of a stored path. Records hold the absolute path the writing node used; its
   * key is the part from the last `datasets/`, `jobs/` or `evaluations/` folder on. A path outside
   * those (a base model of the models dir) is returned unchanged.
   */
  localPath(stored: string): string;
  /** a finished file, stored whole (s3: uploaded; local: already in place) */
  putFile(path: string): Promise<void>;
  /** a finished folder: its files, then its manifest (a folder without a manifest does not exist) */
  putDir(dir: string): Promise<void>;
  /** the file on this node: fetched into the cache when missing; NotFoundError when stored nowhere */
  getFile(stored: string): Promise<string>;
  /** the folder on this node: fetched into the cache when missing; NotFoundError when stored nowhere */
  getDir(stored: string): Promise<string>;
  /**
   * The folder's local path when it is on this node now; else null, and a fetch starts in the
   * background (serving answers 425 meanwhile). Throws the last fetch's error (404 / 503) once.
   */
  dirIfLocal(stored: string): string | null;
  /** is the folder stored (here or in the bucket)? */
  hasDir(stored: string): Promise<boolean>;
  /** a stored file's size and ETag without fetching it (s3: HEAD); null when absent */
  stat(path: string): Promise<ArtifactStat | null>;
  /** a folder and everything under it, here and in the bucket */
  remove(dir: string): Promise<void>;
  /** s3: a presigned PUT URL for the file's object, issued by the bucket; local: null (Loom signs) */
  presignPut(path: string, ttlS: number): Promise<{ url: string; expires_at: string } | null>;
  /** s3: a presigned GET URL (served as `filename`); local: null */
  presignGet(path: string, ttlS: number, filename: string): Promise<{ url: string; expires_at: string } | null>;
  /** DependencyUnavailableError (503) when the store cannot be reached */
  check(): Promise<void>;
  close(): void;
}

/** the artifact folders whose paths map to keys (config.ts ArtifactKind, less models: the runtime's) */
const KEYED = ['datasets', 'jobs', 'evaluations'];

/**
 * The key of a path: below `root` when it is there, else from the last artifact folder on (a
 * record written by a node with another LOOM_ARTIFACTS_DIR). null: not an artifact path.
 */
/** a trained model's ref with this node's paths (its folders must be here: getDir / dirIfLocal first) */
export function localModelRef(store: ArtifactStore | undefined, ref: ModelRef): ModelRef {
  if (!store) return ref;
  return {
    ...ref, ...(ref.dir ? { dir: store.localPath(ref.dir) } : {}), ...(ref.base_dir ? { base_dir: store.localPath(ref.base_dir) } : {}),
  };
}

export function artifactKey(root: string, path: string): string | null {
  const norm = path.replace(/\\/g, '/');
  const base = root.replace(/\\/g, '/').replace(/\/+$/, '') + '/';
  if (norm.startsWith(base)) {
    const rel = norm.slice(base.length);
    return KEYED.includes(rel.split('/')[0]!) ? rel : null;
  }
  const parts = norm.split('/');
  for (let i = parts.length - 2; i >= 0; i--) if (KEYED.includes(parts[i]!)) return parts.slice(i).join('/');
  return null;
}

