// A Loom server in a child process (fixtures/crash-server.ts) on a given data dir, for the tests
// that kill the server (SIGKILL) and restart it on the same data.
import { spawn } from 'node:child_process';
import { join } from 'node:path';

export interface ChildServer { url: string; key: string | null; exited: Promise<number | null>; kill(): void }

/**
 * `crash`: where the child kills itself (see fixtures/crash-server.ts); '' = never.
 * `config`: a partial ServiceConfig for the child (JSON-serializable: catalogFile, plans, ...).
 */
export async function startChild(dataDir: string, crash = '', config: object = {}): Promise<ChildServer> {
  // node itself (not the tsx wrapper) so the SIGKILL hits the process holding the store
  const script = join(import.meta.dirname, 'fixtures/crash-server.ts');
  const args = ['--import', 'tsx', script, dataDir, crash, JSON.stringify(config)];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const line = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (c) => { buf += c; if (buf.includes('\n')) resolve(buf.split('\n')[0]); });
    child.on('exit', () => reject(new Error('server exited before listening')));
  });
  return { ...JSON.parse(line), exited, kill: () => child.kill('SIGKILL') };
}
