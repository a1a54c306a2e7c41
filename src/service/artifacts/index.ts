// The artifact store: where datasets (uploads and processed versions), training jobs (checkpoints,
// final weights, weight archives) and evaluations live. Two implementations behind one interface:
//   local.ts  the folder LOOM_ARTIFACTS_DIR itself (default; a shared mount makes it multi-node)
//   s3.ts     an S3-compatible bucket (LOOM_S3_BUCKET): the folder becomes this node's cache of it
// Workers always compute on local files. The services name artifacts by their path under this
// node's folder (artifactDir() in config.ts is the one place those paths are derived); the store
// maps a path to its key (its path below the folder, e.g. jobs/<id>/output/final/model.safetensors).
// Keys are write-once: a version, a job or a checkpoint has its own id, so a cached copy never goes
// stale. A node publishes what it produced once it is complete (putFile / putDir: whole objects,
// a folder's manifest last) and fetches what it needs (getFile / getDir: into a temporary, checked
// by size and ETag, renamed into place), so no reader ever sees half an object or half a folder.
import type { ServiceConfig } from '../config.ts';
import { createLocalArtifacts } from './local.ts';
import type { ArtifactStore } from './types.ts';

export type { ArtifactStat, ArtifactStore } from './types.ts';
export { artifactKey, localModelRef } from './types.ts';

/** the AWS SDK is loaded only when a bucket is configured (it takes a while to import: not on every start) */
export async function createArtifactStore(config: Pick<ServiceConfig, 'artifactsDir' | 's3'>): Promise<ArtifactStore> {
  if (!config.s3) return createLocalArtifacts(config.artifactsDir);
  const { createS3Artifacts } = await import('./s3.ts');
  return createS3Artifacts(config.artifactsDir, config.s3);
}
