// The artifact store as a folder (LOOM_ARTIFACTS_DIR, default the data dir): files are written in
// place by the services, so publishing is nothing to do and reading is the path itself. Several
// nodes share it by mounting one folder at the same path (records hold absolute paths).
import { existsSync, rmSync, statSync } from 'node:fs';
import { NotFoundError } from '../errors.ts';
import type { ArtifactStore } from './types.ts';

export function createLocalArtifacts(root: string): ArtifactStore {
  const missing = (path: string): never => { throw new NotFoundError(`${path} is not in the artifacts folder`); };
  return {
    kind: 'local',
    root,
    localPath: (stored) => stored,
    async putFile() {},
    async putDir() {},
    async getFile(stored) { return existsSync(stored) ? stored : missing(stored); },
    async getDir(stored) { return existsSync(stored) ? stored : missing(stored); },
    dirIfLocal: (stored) => stored,
    async hasDir(stored) { return existsSync(stored); },
    async stat(path) {
      try { return { size: statSync(path).size, etag: null }; } catch { return null; }
    },
    async remove(dir) { rmSync(dir, { recursive: true, force: true }); },
    async presignPut() { return null; },
    async presignGet() { return null; },
    async check() {},
    close() {},
  };
}
