// autocannon (from bench/package.json: `npm install --prefix bench`) run as a child process, for the
// HTTP benches (bench/http.ts, bench/scale.ts): its CLI with --json, the summary line parsed.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export interface CannonOptions {
  url: string;
  connections: number;
  seconds: number;
  method?: string;
  body?: string;
  headers?: Record<string, string>;
  /** run autocannon pinned to this CPU (taskset) */
  cpu?: number | null;
}

export interface CannonResult {
  /** requests answered in all */
  total: number;
  /** autocannon's mean of its per-second request counts */
  rpsAverage: number;
  /** total / seconds */
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** errors and timeouts */
  errors: number;
}

/** one autocannon run; rejects when it fails or prints no summary */
export function cannon(o: CannonOptions): Promise<CannonResult> {
  const cli = createRequire(join(import.meta.dirname, 'package.json')).resolve('autocannon/autocannon.js');
  const headers = Object.entries(o.headers ?? {}).flatMap(([k, v]) => ['-H', `${k}=${v}`]);
  const args = [cli, '-c', String(o.connections), '-d', String(o.seconds), ...(o.method ? ['-m', o.method] : []),
    ...(o.body !== undefined ? ['-b', o.body] : []), ...headers, '--json', o.url];
  const [cmd, a] = o.cpu === undefined || o.cpu === null
    ? [process.execPath, args] : ['taskset', ['-c', String(o.cpu), process.execPath, ...args]];
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, a, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !line.startsWith('{')) {
        return reject(new Error(`autocannon failed (${code}): ${err.slice(-1000)}`));
      }
      const r = JSON.parse(line);
      resolve({
        total: r.requests.total, rpsAverage: r.requests.average, rps: r.requests.total / o.seconds,
        p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors + r.timeouts,
      });
    });
  });
}
