// A test server on the production runtime seam (runtime-local.ts) with the tiny GLiNER2 of the goldens
// on disk as `gliner2-tiny`: what a user's `npm start` serves from a models folder, over HTTP.
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { ENCODER_DIR } from '../compat/tiny-runtime.ts';
import { startServer, type TestServer } from './helpers.ts';

/** starts it; close() also removes the temporary models folder */
export async function startLocalEncoderServer(): Promise<TestServer> {
  const modelsDir = mkdtempSync(join(tmpdir(), 'loom-local-enc-'));
  symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
  const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }), config: { modelsDir } });
  return {
    ...ts,
    async close() {
      await ts.close();
      rmSync(modelsDir, { recursive: true, force: true });
    },
  };
}
