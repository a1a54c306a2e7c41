// `npm run bench -- http [--quick] [--json] [--duration S] [--connections N] [--rounds N] [--also 0,proxy,floor]
// [--against REV] | --pipeline`: per-request cost of Loom's HTTP pipeline against a bare uWebSockets.js handler from
// the same package, loaded side by side with autocannon on loopback. Loom (bench/http-server.mts, the default
// configuration: the native framing guard on, or as LOOM_HTTP_GUARD says) and the bare handler (bench/http-bare.mjs)
// run in their own processes pinned to CPU 0 (taskset, when there are 2+ CPUs), autocannon pinned to CPU 1. The bare
// handler answers GET /health and GET /v1/models with the status line, header lines and body bytes Loom answered them
// with (recorded first), so each Loom row is compared with a bare row that writes as much. Each round loads every
// target in turn (an untimed warm-up first), so drift on a shared machine hits all alike. Two ratios per Loom row:
// `ratio` is its median req/s over the bare row's; `cpu_ratio` is the median over rounds of the bare row's server CPU
// time per request over Loom's in the same round (`cpu_ratio_runs`: each round's; every thread of the server process,
// /proc/<pid>/task/*/schedstat, read before and after each run; both processes pinned to the same CPU), which is what
// the req/s ratio would be on a dedicated core and does not depend on how much of CPU 0 other processes took.
// `idle_us_per_req`: the server's CPU time with no requests (measured for 2 s before the runs) per request at the row's
// rate, the part of cpu_us_per_req that is background work. --also adds the same rows for more Loom servers with other
// LOOM_HTTP_GUARD settings (0: no guard; proxy: server/guard.ts's proxy, whose CPU time is in the same process);
// `floor` adds rows for bench/http-floor.mjs, a uWS handler doing only the work any API server must (a key lookup in a
// Map, a per-address rate window and its headers) for the same bytes. --against REV adds rows for the server of another
// commit (`git archive REV`, run with this tree's node_modules and native build), loaded at the same time as this
// tree's (two autocannons), so both meet the same load: an A/B of a change on a machine whose load drifts
// (`cpu_over_against`: this tree's server CPU per request over the other's, per round and their median). Each of the
// two then gets part of the load, so their cpu_ratio against the bare rows (loaded alone) is not the figure to quote.
// --pipeline instead runs bench/http-pipeline.mts: the CPU time of Loom's own code per request, in process, with stub
// uWS objects (no sockets), a figure a shared CPU hardly moves.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { availableParallelism, cpus } from 'node:os';
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cannon } from './cannon.ts';

interface Target {
  name: string; port: () => number; pid: () => number; path: string; headers: Record<string, string>;
  /** --against: the other commit's row, loaded at the same time as this one (its own autocannon) */
  twin?: Target;
}

/** on-CPU nanoseconds of every thread of `pid` so far (Linux schedstat); null where unavailable */
function cpuNs(pid: number): number | null {
  try {
    let ns = 0;
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    }
    return ns;
  } catch { return null; }
}
interface Sample { name: string; rps: number; p50: number; p99: number; non2xx: number; errors: number; cpuUs: number }

const here = import.meta.dirname;
const arg = (argv: string[], name: string, dflt: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};

function pinned(cpu: number | null, cmd: string, args: string[]): [string, string[]] {
  return cpu === null ? [cmd, args] : ['taskset', ['-c', String(cpu), cmd, ...args]];
}

/** start a server process; resolves with the JSON line it prints on stderr */
function startServer(
  cpu: number | null, args: string[], env: Record<string, string> = {}, cwd = join(here, '..'),
): Promise<{ proc: ChildProcess; info: any }> {
  return new Promise((resolve, reject) => {
    const [cmd, a] = pinned(cpu, process.execPath, args);
    const proc = spawn(cmd, a, {
      cwd, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env },
    });
    let err = '';
    const onData = (d: Buffer) => {
      err += d;
      const line = err.split('\n').find((l) => l.startsWith('{"port"'));
      if (!line) return;
      proc.stderr!.off('data', onData);
      proc.stderr!.resume();
      resolve({ proc, info: JSON.parse(line) });
    };
    proc.stderr!.on('data', onData);
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${err.slice(-2000)}`)));
  });
}

async function load(cpu: number | null, t: Target, seconds: number, connections: number): Promise<Sample> {
  const url = `http://127.0.0.1:${t.port()}${t.path}`;
  const cpu0 = cpuNs(t.pid());
  const r = await cannon({ url, connections, seconds, headers: t.headers, cpu });
  const cpu1 = cpuNs(t.pid());
  const cpuUs = cpu0 === null || cpu1 === null ? NaN : (cpu1 - cpu0) / 1000 / r.total;
  return {
    name: t.name, rps: r.rpsAverage, p50: r.p50, p99: r.p99, non2xx: r.non2xx, errors: r.errors, cpuUs,
  };
}

/**
 * `rev` (a commit) unpacked with `git archive` into a temp folder, to run its bench/http-server.mts beside
 * this tree's (--against): this tree's node_modules and native build are linked in, so the rows differ
 * only in their TypeScript
 */
function checkout(rev: string): string {
  const root = join(here, '..');
  const dir = mkdtempSync(join(tmpdir(), 'loom-bench-http-rev-'));
  const tar = spawnSync('sh', ['-c', `git archive "$0" | tar -x -C "$1"`, rev, dir], { cwd: root, encoding: 'utf8' });
  if (tar.status !== 0) throw new Error(`git archive ${rev} failed: ${tar.stderr}`);
  symlinkSync(realpathSync(join(root, 'node_modules')), join(dir, 'node_modules'));
  symlinkSync(realpathSync(join(root, 'build')), join(dir, 'build'));
  return dir;
}

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };

/** --pipeline: bench/http-pipeline.mts pinned to CPU 0 (when there are 2+ CPUs) */
function pipeline(quick: boolean, json: boolean): void {
  const pin = availableParallelism() >= 2 && spawnSync('taskset', ['-V']).status === 0 ? 0 : null;
  const args = ['--import', 'tsx', join(here, 'http-pipeline.mts'), String(quick ? 20_000 : 100_000)];
  const [cmd, a] = pinned(pin, process.execPath, args);
  const r = spawnSync(cmd, a, { cwd: join(here, '..'), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`http-pipeline failed (${r.status}): ${r.stderr.slice(-2000)}`);
  const rows = r.stdout.trim().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  if (json) for (const row of rows) console.log(JSON.stringify({ bench: 'http-pipeline', ...row }));
  else {
    console.log(`http --pipeline: Loom's own JS per request, in process (stub uWS), CPU ${cpus()[0]?.model}`);
    console.table(rows);
  }
}

/** Loom's answer to GET `path`, as the bare handler should repeat it: status, header lines (but those
 * uWS writes itself: Date, uWebSockets, Content-Length) and body */
function record(port: number, path: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.on('error', reject);
    s.on('close', () => {
      const all = Buffer.concat(chunks);
      const end = all.indexOf('\r\n\r\n');
      const [statusLine, ...lines] = all.subarray(0, end).toString('latin1').split('\r\n');
      const own = new Set(['date', 'uwebsockets', 'content-length']);
      resolve({
        status: statusLine!.replace(/^HTTP\/1\.1 /, ''),
        headers: lines.map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()] as [string, string])
          .filter(([k]) => !own.has(k.toLowerCase())),
        body: all.subarray(end + 4).toString('base64'),
      });
    });
    const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    s.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`);
  });
}
interface Answer { status: string; headers: Array<[string, string]>; body: string }

export async function run(argv: string[]) {
  const quick = argv.includes('--quick');
  if (argv.includes('--pipeline')) return pipeline(quick, argv.includes('--json'));
  const json = argv.includes('--json');
  const seconds = arg(argv, '--duration', quick ? 2 : 5);
  const rounds = arg(argv, '--rounds', quick ? 1 : 3);
  const connections = arg(argv, '--connections', 64);
  // --also 0,proxy: more Loom servers, with those LOOM_HTTP_GUARD settings; floor: the floor handler
  const alsoArgs = argv.includes('--also') ? argv[argv.indexOf('--also') + 1]!.split(',') : [];
  const also = alsoArgs.filter((a) => a !== 'floor');
  const ncpu = availableParallelism();
  const hasTaskset = spawnSync('taskset', ['-V']).status === 0;
  const [serverCpu, loadCpu] = ncpu >= 2 && hasTaskset ? [0, 1] : [null, null];
  const loomArgs = ['--import', 'tsx', join(here, 'http-server.mts')];
  const env = process.env.LOOM_HTTP_GUARD;
  const configs = [env === undefined ? 'default' : `LOOM_HTTP_GUARD=${env}`];
  for (const g of also) configs.push(`LOOM_HTTP_GUARD=${g}`);
  const looms: Array<{ proc: ChildProcess; info: any }> = [];
  const others: Array<{ proc: ChildProcess; info: any }> = [];
  let againstDir: string | null = null;
  const stop = () => {
    for (const s of [...looms, ...others]) s.proc.kill('SIGKILL');
    if (againstDir) rmSync(againstDir, { recursive: true, force: true });
    againstDir = null;
  };
  process.on('exit', stop);
  looms.push(await startServer(serverCpu, loomArgs));
  for (const g of also) looms.push(await startServer(serverCpu, loomArgs, { LOOM_HTTP_GUARD: g }));
  // --against REV: the same server from another commit, side by side (A/B of a change)
  const against = argv.includes('--against') ? argv[argv.indexOf('--against') + 1]! : null;
  if (against) {
    const dir = (againstDir = checkout(against));
    looms.push(await startServer(serverCpu, ['--import', 'tsx', join(dir, 'bench/http-server.mts')], {}, dir));
    configs.push(`@${against}`);
  }
  // each server has its own store and key; a request to the bare handler carries the first one's
  const routes: Array<[string, (key: string) => Record<string, string>]> = [
    ['/health', () => ({})], ['/v1/models', (key) => ({ 'X-API-Key': key })],
  ];
  const key = looms[0]!.info.key;
  // the bare handler answers each path with the bytes Loom answers it with
  const answers: Record<string, Answer> = {};
  for (const [path, headers] of routes) answers[path] = await record(looms[0]!.info.port, path, headers(key));
  const answersFile = join(mkdtempSync(join(tmpdir(), 'loom-bench-http-')), 'answers.json');
  writeFileSync(answersFile, JSON.stringify(answers));
  const bare = await startServer(serverCpu, [join(here, 'http-bare.mjs'), answersFile]);
  others.push(bare);
  const floor = alsoArgs.includes('floor')
    ? await startServer(serverCpu, [join(here, 'http-floor.mjs'), answersFile, key]) : null;
  if (floor) others.push(floor);
  try {
    const targets: Target[] = [];
    for (const [path, headers] of routes) {
      targets.push({
        name: `bare uWS ${path}`, port: () => bare.info.port, pid: () => bare.proc.pid!, path, headers: headers(key),
      });
      if (floor) {
        targets.push({
          name: `floor uWS ${path}`, port: () => floor.info.port, pid: () => floor.proc.pid!, path,
          headers: headers(key),
        });
      }
      const first = targets.length;
      looms.forEach((l, i) => {
        const name = `GET ${path}${configs.length > 1 || i > 0 ? `, ${configs[i]}` : ''}`;
        const t: Target = { name, port: () => l.info.port, pid: () => l.proc.pid!, path, headers: headers(l.info.key) };
        // the other commit's server is loaded together with this tree's (both pinned alike), so both
        // meet the same load on a shared machine: their ratio per round is the A/B figure
        if (against && i === looms.length - 1) targets[first]!.twin = t;
        else targets.push(t);
      });
    }
    // the bare row a target compares with
    const bareOf = (t: Target) => `bare uWS ${t.path}`;
    if (!json) {
      const cpu = cpus()[0]?.model;
      console.log(`http: ${connections} connections, ${seconds} s x ${rounds} rounds per target, CPU ${cpu}`);
      const pins = `servers on CPU ${serverCpu}, autocannon on CPU ${loadCpu}`;
      console.log(serverCpu === null ? 'not pinned (1 CPU or no taskset)' : pins);
      for (const p of Object.keys(answers)) {
        const a = answers[p]!;
        console.log(`bare ${p}: ${a.headers.length} header lines, ${Buffer.from(a.body, 'base64').length} body bytes`);
      }
    }
    /** one target's run, with its twin's at the same time */
    const loadWith = (t: Target, s: number) =>
      Promise.all([load(loadCpu, t, s, connections), ...(t.twin ? [load(loadCpu, t.twin, s, connections)] : [])]);
    for (const t of targets) await loadWith(t, 1); // warm-up (JIT), untimed
    // what each server spends with no requests (timers, metrics sampling): cpu_us_per_req includes
    // it, spread over the run's requests; `idle_us_per_req` says how much of it that is
    const idleMsPerS = new Map<number, number>();
    for (const s of [...looms, ...others]) {
      const a = cpuNs(s.proc.pid!);
      await new Promise((r) => setTimeout(r, 2000));
      const b = cpuNs(s.proc.pid!);
      idleMsPerS.set(s.proc.pid!, a === null || b === null ? NaN : (b - a) / 1e6 / 2);
    }
    const samples: Sample[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const t of targets) {
        for (const s of await loadWith(t, seconds)) {
          samples.push(s);
          if (json) console.log(JSON.stringify({ bench: 'http', round: r, ...s }));
        }
      }
    }
    const by = (n: string) => samples.filter((s) => s.name === n);
    const rows = targets.flatMap((t) => (t.twin ? [t, t.twin] : [t])).map((t) => {
      const ss = by(t.name);
      const bs = by(bareOf(t));
      const rps = median(ss.map((s) => s.rps));
      const cpuUs = median(ss.map((s) => s.cpuUs));
      // round by round (a round loads the bare row and this one minutes apart at most): drift of a shared
      // machine between rounds cancels in each pair, which it does not in a ratio of the two medians
      const paired = ss.map((s, i) => bs[i]!.cpuUs / s.cpuUs);
      return {
        target: t.name, rps: Math.round(rps), ratio: +(rps / median(bs.map((s) => s.rps))).toFixed(3),
        cpu_us_per_req: +cpuUs.toFixed(2), cpu_ratio: +median(paired).toFixed(3),
        idle_us_per_req: +((idleMsPerS.get(t.pid()) ?? NaN) * 1000 / rps).toFixed(2),
        p50_ms: median(ss.map((s) => s.p50)), p99_ms: median(ss.map((s) => s.p99)),
        non2xx: ss.reduce((a, s) => a + s.non2xx, 0), errors: ss.reduce((a, s) => a + s.errors, 0),
        runs: ss.map((s) => Math.round(s.rps)).join(' '),
        cpu_runs: ss.map((s) => s.cpuUs.toFixed(1)).join(' '),
        cpu_ratio_runs: paired.map((x) => x.toFixed(2)).join(' '),
      };
    });
    // --against: this tree's server CPU per request over the other commit's, round by round
    const ab = targets.filter((t) => t.twin).map((t) => {
      const a = by(t.name);
      const b = by(t.twin!.name);
      const perRound = a.map((s, i) => +(s.cpuUs / b[i]!.cpuUs).toFixed(3));
      return { target: t.name, against: t.twin!.name, cpu_over_against: median(perRound), rounds: perRound.join(' ') };
    });
    if (json) console.log(JSON.stringify({ bench: 'http', summary: rows, ...(ab.length ? { ab } : {}) }));
    else {
      console.table(rows);
      if (ab.length) console.table(ab);
    }
    if (rows.some((r) => r.non2xx || r.errors)) {
      console.error('warning: some responses were not 2xx or failed; the figures are not comparable');
    }
  } finally {
    stop();
  }
}
