// Raw request framing over `net` sockets (fast-check, seeded): lowercase and unknown methods,
// absolute-form and malformed targets, HTTP/1.0 and unknown versions, missing or repeated Host,
// 100+ headers, control bytes, bad Content-Length, CL plus TE, bare LF line ends. Every request gets
// an HTTP answer (400 for what is not valid HTTP/1.x, a normal answer for HTTP/1.0) within the
// bound, never a 5xx other than HTTP's 501/505 refusals, and the process keeps serving. LOOM_FUZZ_SEED / LOOM_FUZZ_RAW_RUNS.
import t from 'tap';
import { rawCases, rawExchange, runRawCases, summarize } from './fuzz.ts';
import { makeDataDir, removeDir, ServerProcess } from './helpers.ts';

const SEED = Number(process.env.LOOM_FUZZ_SEED ?? 1313);
const RUNS = Number(process.env.LOOM_FUZZ_RAW_RUNS ?? 150);
const BOUND_MS = 3000;

const dataDir = makeDataDir();
const srv = await new ServerProcess(dataDir).start();
t.teardown(async () => {
  await srv.stop();
  removeDir(dataDir);
});
const port = () => Number(new URL(srv.url).port);

t.test('named cases from the issue are answered', async (t) => {
  const cases: Array<[string, string, number[]]> = [
    ['a valid HTTP/1.1 request (control)', 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', [200]],
    ['HTTP/1.0 GET /health', 'GET /health HTTP/1.0\r\n\r\n', [200]],
    ['lowercase method', 'get /health HTTP/1.1\r\nHost: x\r\n\r\n', [400, 405]],
    ['absolute-form URI', 'GET http://127.0.0.1/health HTTP/1.1\r\nHost: x\r\n\r\n', [200, 400]],
    ['missing Host', 'GET /health HTTP/1.1\r\n\r\n', [400]],
    ['Content-Length: abc', 'POST /projects HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}', [400]],
    [
      'CL plus TE',
      'POST /projects HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      [400],
    ],
    ['control byte in a header', 'GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\u0001b\r\n\r\n', [400]],
    [
      '150 headers',
      `GET /health HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 150 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`,
      [400, 431],
    ],
  ];
  for (const [name, text, want] of cases) {
    const r = await rawExchange(port(), Buffer.from(text, 'latin1'), BOUND_MS);
    t.ok(
      r.status !== null && want.includes(r.status),
      `${name}: answered ${want.join(' or ')} (got ${r.status ?? (r.timedOut ? 'no answer' : 'connection closed')})`,
    );
  }
});

t.test(`${RUNS} generated raw requests (seed ${SEED})`, async (t) => {
  const { findings, byStatus } = await runRawCases(srv, rawCases(SEED, RUNS), { boundMs: BOUND_MS, concurrency: 16 });
  t.comment(`answers: ${JSON.stringify(byStatus)}`);
  if (findings.length) t.comment(`findings:${summarize(findings)}`);
  t.equal(findings.length, 0, `every raw request answered within ${BOUND_MS} ms, no 5xx (findings above)`);
  t.equal((await fetch(srv.url + '/health')).status, 200, 'still healthy afterwards');
});
