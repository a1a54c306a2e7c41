// `npm run bench -- billed [--quick] [--json] [--requests N] [--concurrency C] [--postgres]`: billed POST /inference
// through the whole HTTP pipeline and the store (auth, credit hold, debit + usage + inference record in one
// transaction) with the test runtime double (test/service/fake-runtime.ts), so the figure is the service's
// and the store's cost per call, not a model's. The store is LMDB in a temp folder, or PostgreSQL:
// LOOM_DATABASE_URL's database, or with --postgres a throwaway local cluster (test/helpers/postgres.ts).
// Prints req/s and latency percentiles (ms).
import { startServer, call, makeUser } from '../test/service/helpers.ts';
import { startPostgres, type TestPostgres } from '../test/helpers/postgres.ts';

const arg = (argv: string[], name: string, dflt: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};

export async function run(argv: string[]): Promise<void> {
  const quick = argv.includes('--quick');
  const n = arg(argv, '--requests', quick ? 1000 : 5000);
  const conc = arg(argv, '--concurrency', 16);
  let cluster: TestPostgres | null = null;
  let databaseUrl = process.env.LOOM_DATABASE_URL || null;
  if (argv.includes('--postgres')) {
    cluster = await startPostgres();
    databaseUrl = await cluster.createDb();
  }
  const ts = await startServer({
    config: {
      databaseUrl,
      rateLimits: { edge: { points: 1e9, duration_s: 60 }, default: [{ points: 1e9, duration_s: 60 }], endpoints: [] },
    },
  });
  try {
    const u = await makeUser(ts, { credits: 1000 });
    const body = { model_id: 'test/encoder', text: 'Alice met Bob in Paris', schema: ['person', 'city'] };
    const one = () => call(ts.url, 'POST', '/inference', { key: u.key, body });
    for (let i = 0; i < 100; i++) await one(); // warm-up
    const lat: number[] = [];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: conc }, async () => {
      while (next++ < n) {
        const s = performance.now();
        const r = await one();
        if (r.status !== 200) throw new Error(`${r.status} ${r.text}`);
        lat.push(performance.now() - s);
      }
    }));
    const secs = (performance.now() - t0) / 1000;
    lat.sort((a, b) => a - b);
    const q = (p: number) => Number(lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(2));
    const out = { store: databaseUrl ? 'postgres' : 'lmdb', requests: n, concurrency: conc,
      rps: Math.round(n / secs), p50_ms: q(0.5), p99_ms: q(0.99) };
    console.log(argv.includes('--json') ? JSON.stringify(out) : out);
  } finally {
    await ts.close();
    await cluster?.close();
  }
}
