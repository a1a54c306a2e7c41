// `npm run bench -- reliability [--quick] [--requests N] [--concurrency C] [--fuzz-runs N] [--raw-runs N]
//   [--seed S] [--no-fuzz] [--no-soak] [--json]`: the long runs of the reliability suite
// (test/reliability/), against a real server process (`npm start`'s entry point) with the tiny
// GLiNER2 and TinyStories-656K models on a temp data dir.
//   fuzz: seeded hostile requests to every route (default 300 per route) and raw framing (2,000):
//         findings = 5xx, undocumented error bodies, no answer within the bound, process deaths.
//   soak: N mixed requests (default 100,000; health, /v1/models, encoder inference, decoder chat,
//         history) from C keep-alive clients; the server's anonymous memory (RssAnon, and
//         Anonymous from /proc/<pid>/smaps_rollup) sampled along the run; p50/p99 per kind.
// --quick: 60 per route, 300 raw, 10,000 soak requests.
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { jsonCases, rawCases, runJsonCases, runRawCases, summarize } from '../test/reliability/fuzz.ts';
import {
  DECODER_ID,
  ENCODER_ID,
  login,
  makeDataDir,
  removeDir,
  seedUsers,
  ServerProcess,
  type Session,
} from '../test/reliability/helpers.ts';

function flag(argv: string[], name: string, dflt: number): number {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
}

/** anonymous memory of a process, in MiB: RssAnon (status) and Anonymous (smaps_rollup) */
function anonMiB(pid: number): { rssAnon: number; anonymous: number; rss: number } {
  const kb = (text: string, key: string) =>
    Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) / 1024;
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  let rollup = '';
  try {
    rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  } catch {
    /* older kernels */
  }
  return {
    rssAnon: kb(status, 'RssAnon'),
    anonymous: rollup ? kb(rollup, 'Anonymous') : NaN,
    rss: kb(status, 'VmRSS'),
  };
}

const ms = (x: number) => x.toFixed(2).padStart(8);
const mib = (x: number, w: number) => x.toFixed(1).padStart(w);

const pct = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

type Kind = 'health' | 'models' | 'encoder' | 'decoder' | 'history';
const MIX: Array<[Kind, number]> = [
  ['health', 30],
  ['models', 20],
  ['encoder', 25],
  ['decoder', 10],
  ['history', 15],
];

async function soak(srv: ServerProcess, sess: Session, total: number, concurrency: number, json: boolean) {
  const lat: Record<Kind, number[]> = { health: [], models: [], encoder: [], decoder: [], history: [] };
  const status: Record<string, number> = {};
  const wheel: Kind[] = MIX.flatMap(([k, w]) => Array<Kind>(w).fill(k));
  const texts = [
    'Alice lives in Paris and works for Acme.',
    'Bob flew to Berlin on Tuesday.',
    'Carol met Dan in Rome.',
  ];
  const req = (k: Kind, i: number): [string, RequestInit] => {
    const h = { 'X-API-Key': sess.key, 'Content-Type': 'application/json' };
    switch (k) {
      case 'health':
        return ['/health', {}];
      case 'models':
        return ['/v1/models', { headers: h }];
      case 'history':
        return ['/inferences?limit=20', { headers: h }];
      case 'encoder':
        return [
          '/inference',
          {
            method: 'POST',
            headers: h,
            body: JSON.stringify({ model_id: ENCODER_ID, text: texts[i % 3], schema: ['person', 'city', 'company'] }),
          },
        ];
      case 'decoder':
        return [
          '/v1/chat/completions',
          {
            method: 'POST',
            headers: h,
            body: JSON.stringify({
              model: DECODER_ID,
              messages: [{ role: 'user', content: `Story ${i % 50}` }],
              max_tokens: 8,
            }),
          },
        ];
    }
  };
  const pid = srv.proc.pid!;
  const samples: Array<{ done: number; s: number } & ReturnType<typeof anonMiB>> = [];
  const every = Math.max(1, Math.floor(total / 40));
  let next = 0;
  let done = 0;
  const t0 = performance.now();
  samples.push({ done: 0, s: 0, ...anonMiB(pid) });
  async function worker() {
    while (next < total) {
      const i = next++;
      const k = wheel[(i * 37) % wheel.length];
      const [path, init] = req(k, i);
      const t = performance.now();
      const r = await fetch(srv.url + path, init);
      await r.arrayBuffer();
      lat[k].push(performance.now() - t);
      status[r.status] = (status[r.status] ?? 0) + 1;
      if (++done % every === 0) samples.push({ done, s: (performance.now() - t0) / 1000, ...anonMiB(pid) });
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wall = (performance.now() - t0) / 1000;
  samples.push({ done, s: wall, ...anonMiB(pid) });
  // flat: anonymous memory over the second half vs. the sample at 10% (after warm-up)
  const warm = samples.find((x) => x.done >= total * 0.1) ?? samples[0];
  const half = samples.filter((x) => x.done >= total / 2);
  const peak2 = Math.max(...half.map((x) => x.rssAnon));
  const end = samples[samples.length - 1];
  const all = Object.values(lat).flat();
  const rows = (Object.keys(lat) as Kind[]).map((k) => ({
    kind: k,
    n: lat[k].length,
    p50_ms: pct(lat[k], 50),
    p99_ms: pct(lat[k], 99),
  }));
  const summary = {
    bench: 'reliability-soak',
    requests: done,
    concurrency,
    wall_s: wall,
    req_per_s: done / wall,
    statuses: status,
    p50_ms: pct(all, 50),
    p99_ms: pct(all, 99),
    per_kind: rows,
    rss_anon_mib: { start: samples[0].rssAnon, after_warmup: warm.rssAnon, second_half_peak: peak2, end: end.rssAnon },
    anonymous_mib: { after_warmup: warm.anonymous, end: end.anonymous },
    growth_after_warmup_mib: end.rssAnon - warm.rssAnon,
  };
  if (json) {
    console.log(JSON.stringify({ ...summary, samples }));
    return summary;
  }
  console.log(
    `\nsoak: ${done} requests, ${concurrency} keep-alive clients, ${wall.toFixed(1)} s ` +
      `(${(done / wall).toFixed(0)} req/s), statuses ${JSON.stringify(status)}`,
  );
  console.log('kind      requests   p50 ms   p99 ms');
  for (const r of rows)
    console.log(
      `${r.kind.padEnd(9)} ${String(r.n).padStart(8)} ${ms(r.p50_ms)} ${ms(r.p99_ms)}`,
    );
  console.log(
    `all       ${String(all.length).padStart(8)} ${ms(summary.p50_ms)} ${ms(summary.p99_ms)}`,
  );
  console.log('\nserver memory along the run (MiB): requests  RssAnon  Anonymous(smaps)  RSS');
  const show = samples.filter((_, i) => i % Math.ceil(samples.length / 12) === 0 || i === samples.length - 1);
  for (const x of show)
    console.log(
      `  ${String(x.done).padStart(8)}  ${mib(x.rssAnon, 7)}  ${mib(x.anonymous, 8)}  ${mib(x.rss, 7)}`,
    );
  console.log(
    `anonymous memory after warm-up ${mib(warm.rssAnon, 0)} MiB, peak over the second half ${mib(peak2, 0)}, ` +
      `end ${mib(end.rssAnon, 0)} (growth ${mib(summary.growth_after_warmup_mib, 0)} MiB)`,
  );
  return summary;
}

export async function run(argv: string[]): Promise<void> {
  const quick = argv.includes('--quick');
  const json = argv.includes('--json');
  const seed = flag(argv, '--seed', 1313);
  const perRoute = flag(argv, '--fuzz-runs', quick ? 60 : 300);
  const rawRuns = flag(argv, '--raw-runs', quick ? 300 : 2000);
  const total = flag(argv, '--requests', quick ? 10_000 : 100_000);
  const concurrency = flag(argv, '--concurrency', 16);
  const dataDir = makeDataDir('loom-bench-rel-');
  const [user] = await seedUsers(dataDir, [{ credits: 10_000_000 }]);
  const srv = await new ServerProcess(dataDir).start();
  let failed = false;
  try {
    const sess = await login(srv.url, user);
    if (!argv.includes('--no-fuzz')) {
      const t0 = performance.now();
      const js = await runJsonCases(srv, sess, jsonCases(seed, perRoute), { boundMs: 30_000, concurrency: 4 });
      const raw = await runRawCases(srv, rawCases(seed, rawRuns), { boundMs: 3000, concurrency: 32 });
      const s = (performance.now() - t0) / 1000;
      if (json)
        console.log(
          JSON.stringify({
            bench: 'reliability-fuzz',
            seed,
            json_requests: js.sent,
            statuses: js.byStatus,
            crashes: js.crashes,
            findings: js.findings.length,
            raw_requests: rawRuns,
            raw_answers: raw.byStatus,
            raw_findings: raw.findings.length,
            s,
          }),
        );
      else {
        console.log(
          `fuzz (seed ${seed}): ${js.sent} JSON requests over every route (${perRoute} each), ` +
            `statuses ${JSON.stringify(js.byStatus)}, slowest ${js.maxMs} ms, process deaths ${js.crashes}, ` +
            `findings ${js.findings.length}${summarize(js.findings, 30)}`,
        );
        console.log(
          `raw framing: ${rawRuns} requests, answers ${JSON.stringify(raw.byStatus)}, ` +
            `findings ${raw.findings.length}${summarize(raw.findings, 15)}`,
        );
        console.log(`fuzz time ${s.toFixed(1)} s`);
      }
      failed ||= js.findings.length > 0 || raw.findings.length > 0;
    }
    if (!argv.includes('--no-soak')) await soak(srv, sess, total, concurrency, json);
  } finally {
    await srv.stop();
    removeDir(dataDir);
  }
  if (failed) process.exitCode = 1;
}
