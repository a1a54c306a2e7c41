// `loom admin …` run as a user runs it: bin/loom.mjs in its own process, its output collected.
// Async, not spawnSync: a server under test may run in the calling process, and lmdb-js runs a write
// transaction's callback on the main thread while the write lock is held; a blocked event loop would
// keep the lock from the child process (a deadlock that only the test harness can create).
import { spawn } from 'node:child_process';
import { join } from 'node:path';

const bin = join(import.meta.dirname, '../../bin/loom.mjs');

export interface AdminRun { code: number | null; stdout: string; stderr: string }

/** `loom admin <args>` in `cwd`, with LOOM_DATA_DIR `dataDir` (unset when absent) and no LOOM_DATABASE_URL */
export function runAdmin(args: string[], opts: { cwd?: string; dataDir?: string } = {}): Promise<AdminRun> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.LOOM_DATA_DIR;
  delete env.LOOM_DATABASE_URL;
  if (opts.dataDir) env.LOOM_DATA_DIR = opts.dataDir;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, 'admin', ...args], { cwd: opts.cwd, env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
