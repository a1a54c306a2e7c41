// A throwaway redis-server for a test: a child process (`--daemonize no`) on a free loopback port,
// nothing persisted (`--save '' --appendonly no`), killed on teardown. Debian's `redis-server`
// (.ci/run installs it); where the binary is absent, tests that need it skip with REDIS_SKIP.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** the redis-server binary on PATH, or null */
export const REDIS_BIN: string | null = (() => {
  const r = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : null;
})();

/** a tap `skip` value: false where redis-server exists, else the reason */
export const REDIS_SKIP: string | false = REDIS_BIN
  ? false
  : 'redis-server is not installed (apt-get install redis-server; .ci/run does): Redis tests skipped';

/** a free loopback TCP port (the OS picks one; it is released before redis binds it) */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export class RedisServer {
  proc: ChildProcess | null = null;
  output = '';
  constructor(readonly port: number) {}

  get url(): string { return `redis://127.0.0.1:${this.port}`; }

  /** starts (or restarts, on the same port) and waits until it accepts connections */
  async start(timeoutMs = 10_000): Promise<this> {
    if (!REDIS_BIN) throw new Error(String(REDIS_SKIP));
    if (this.proc) throw new Error('redis-server is already running');
    this.output = '';
    const proc = spawn(REDIS_BIN, [
      '--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--daemonize', 'no', '--protected-mode', 'yes', '--loglevel', 'notice', '--dir', '/tmp',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    const onData = (d: Buffer) => { this.output += d.toString(); };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', onData);
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    exited.then(() => { if (this.proc === proc) this.proc = null; });
    const until = Date.now() + timeoutMs;
    while (!/Ready to accept connections/.test(this.output)) {
      if (this.proc !== proc) throw new Error(`redis-server exited at start:\n${this.output.slice(-2000)}`);
      if (Date.now() > until) {
        proc.kill('SIGKILL');
        throw new Error(`redis-server did not start in ${timeoutMs} ms:\n${this.output.slice(-2000)}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return this;
  }

  /** freezes it (SIGSTOP): connections stay open, nothing is answered; resume() thaws it */
  pause(): void { this.proc?.kill('SIGSTOP'); }
  resume(): void { this.proc?.kill('SIGCONT'); }

  /** kills it (SIGKILL: an outage, not a shutdown) and waits until the process is gone */
  async stop(): Promise<void> {
    const proc = this.proc;
    if (!proc) return;
    const gone = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGKILL');
    proc.kill('SIGCONT');
    await gone;
    this.proc = null;
  }
}

/** a redis-server on a free loopback port, stopped when `t` ends */
export async function startRedis(t: { teardown(fn: () => unknown): void }): Promise<RedisServer> {
  const r = await new RedisServer(await freePort()).start();
  t.teardown(() => r.stop());
  return r;
}
