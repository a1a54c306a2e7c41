// Seeded hostile inputs (fast-check) for every route of the route table and for raw HTTP framing,
// and the runners that send them to a ServerProcess and collect every answer that breaks the
// contract: a 5xx, an undocumented error body, no answer within the bound, or the process dying.
// Used by the fuzz tests (modest counts) and by `npm run bench -- reliability` (many more).
import fc from 'fast-check';
import { connect } from 'node:net';
import { randomUUID } from 'node:crypto';
import { ROUTE_MODULES, type RouteDef } from '../../server/index.ts';
import { DECODER_ID, ENCODER_ID, errorBodyProblem, errorFamily, type ServerProcess, type Session } from './helpers.ts';

/** every route the server mounts, read from the route table itself */
export function routeTable(): RouteDef[] {
  const state = { draining: false, inflight: 0, idle: [] };
  return ROUTE_MODULES.flatMap((m) => m(state));
}

const MSGS = [{ role: 'user', content: 'Once upon a time' }];
/** a body each route accepts (so that mutations reach the handler, not only the schema) */
const VALID: Record<string, () => Record<string, unknown>> = {
  'POST /inference': () => ({ model_id: ENCODER_ID, text: 'Alice lives in Paris.', schema: ['person', 'city'] }),
  'POST /projects/:project_id/inference': () => ({ text: 'Alice lives in Paris.', schema: { entities: ['person'] } }),
  'POST /v1/chat/completions': () => ({ model: DECODER_ID, messages: MSGS, max_tokens: 8 }),
  'POST /v1/completions': () => ({ model: DECODER_ID, prompt: 'Once upon a time', max_tokens: 8 }),
  'POST /v1/responses': () => ({ model: DECODER_ID, input: 'Once upon a time', max_output_tokens: 8 }),
  'POST /v1/messages': () => ({ model: DECODER_ID, max_tokens: 8, messages: MSGS }),
  'POST /v1/embeddings': () => ({ model: ENCODER_ID, input: 'Alice lives in Paris.' }),
  'POST /gliner-2/extract': () => ({
    model_id: ENCODER_ID,
    text: 'Alice lives in Paris.',
    schema: { entities: ['person'] },
  }),
  'POST /gliner-2/extract-entities': () => ({
    model_id: ENCODER_ID,
    text: 'Alice lives in Paris.',
    entities: ['person'],
  }),
  'POST /gliner-2/classify-text': () => ({
    model_id: ENCODER_ID,
    text: 'Great movie',
    classifications: [{ task: 'sentiment', labels: ['positive', 'negative'] }],
  }),
  'POST /gliner-2/extract-json': () => ({
    model_id: ENCODER_ID,
    text: 'Alice, 30, lives in Paris.',
    structures: { person: { name: 'str', city: 'str' } },
  }),
  'POST /gliner-2/extract-relations': () => ({
    model_id: ENCODER_ID,
    text: 'Alice works for Acme.',
    relations: ['works_for'],
  }),
  'POST /generate': () => ({
    task_type: 'ner',
    dataset_name: 'fuzz-gen',
    num_examples: 1,
    labels: ['person'],
    model_id: DECODER_ID,
    labeling_model_id: ENCODER_ID,
  }),
  'POST /generate/ner/label-existing': () => ({
    labels: ['person'],
    inputs: ['Alice lives in Paris.'],
    model_id: ENCODER_ID,
  }),
  'POST /generate/classification/label-existing': () => ({
    labels: ['good', 'bad'],
    inputs: ['Great movie'],
    model_id: ENCODER_ID,
  }),
  'PUT /judge': () => ({ model: DECODER_ID, rubric: 'Pass when the reply is a story.', sample_rate: 0.5 }),
  'PUT /projects/:project_id/judge': () => ({ model: DECODER_ID, rubric: 'Pass when the reply is a story.' }),
  'POST /inferences/judge': () => ({ task: 'ner', limit: 5 }),
  'POST /felix/training-jobs': () => ({
    base_model: 'loom/gliner2-init-tiny',
    datasets: [{ name: 'no-such-dataset' }],
    model_name: 'fuzz',
    nr_epochs: 1,
  }),
  'POST /felix/evaluations': () => ({ base_model: ENCODER_ID, dataset_name: 'no-such-dataset' }),
  'POST /felix/datasets/upload/url': () => ({ dataset_name: 'fuzz-ds', dataset_type: 'ner', filename: 'f.jsonl' }),
  'POST /felix/datasets/upload/process': () => ({ dataset_name: 'fuzz-ds', upload_id: randomUUID() }),
  'POST /projects': () => ({ name: 'fuzz project' }),
  'POST /projects/:project_id/deployments': () => ({ training_job_id: randomUUID() }),
  'PATCH /projects/:project_id': () => ({ adaptive: { enabled: true, min_new_corrections: 5, min_gain: 0.02 } }),
  'POST /inferences/:id/feedback': () => ({ verdict: 'incorrect', corrected_output: { entities: [] }, notes: 'n' }),
  'POST /create-api-key': () => ({ name: 'fuzz key' }),
  'DELETE /delete-api-key': () => ({ key_id: randomUUID() }),
  'POST /auth/login': () => ({ email: 'nobody@example.com', password: 'wrong password' }),
};

// ---- hostile JSON, as raw text (so that numbers like 1e400 can be sent) ---------------------------
const rawNumber = fc.constantFrom(
  '1e400',
  '-1e400',
  '1e-400',
  '9007199254740993',
  '-0',
  '1e308',
  '-1',
  '0',
  '2147483648',
  '4294967297',
  '0.5',
  '123456789012345678901234567890',
);
const nasty = fc.constantFrom(
  '\ud800',
  'a\udfffb',
  '\udc00\ud800',
  '\u0000',
  '%ZZ',
  '../../etc/passwd',
  '\u202e',
  'null',
  '',
  ' ',
  '\\',
  '"',
  '<script>',
  '\uffff',
  '🦜'.repeat(3),
);
const longString = fc.constantFrom(4093, 4096, 5000, 20_000, 60_000).chain((n) =>
  fc.constantFrom(
    'A'.repeat(n), // one long word
    'word '.repeat(Math.ceil(n / 5)), // many words
    '\ud83e\udd9c'.repeat(Math.ceil(n / 2)),
  ),
);
const str = fc.oneof(
  { weight: 3, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  { weight: 2, arbitrary: nasty },
  { weight: 1, arbitrary: longString },
);
const leaf: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: str.map((s) => JSON.stringify(s)) },
  { weight: 3, arbitrary: rawNumber },
  { weight: 1, arbitrary: fc.double().map((d) => JSON.stringify(d)) },
  { weight: 1, arbitrary: fc.integer().map(String) },
  { weight: 1, arbitrary: fc.constantFrom('null', 'true', 'false', '{}', '[]') },
  { weight: 1, arbitrary: fc.constantFrom(200, 5000, 100_000).map((d) => '['.repeat(d) + ']'.repeat(d)) },
  { weight: 1, arbitrary: fc.constantFrom(200, 5000).map((d) => '{"a":'.repeat(d) + '1' + '}'.repeat(d)) },
);
const KEYS = [
  'model',
  'model_id',
  'text',
  'schema',
  'messages',
  'content',
  'role',
  'max_tokens',
  'temperature',
  'top_k',
  'top_p',
  'seed',
  'stream',
  'name',
  'labels',
  'inputs',
  'threshold',
  '__proto__',
  'constructor',
  'x'.repeat(300),
];
export const hostileJson: fc.Arbitrary<string> = fc.letrec<{ v: string }>((tie) => ({
  v: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.array(tie('v'), { maxLength: 4 }).map((xs) => `[${xs.join(',')}]`),
    fc
      .array(fc.tuple(fc.oneof(fc.constantFrom(...KEYS), fc.string({ maxLength: 8 })), tie('v')), { maxLength: 4 })
      .map((kv) => `{${kv.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`),
  ),
})).v;

/** replace, remove or add one member of a valid body, at the top level or one level down */
function mutate(valid: Record<string, unknown>): fc.Arbitrary<string> {
  const keys = Object.keys(valid);
  const toText = (o: Record<string, unknown>, over: Record<string, string>) =>
    `{${[
      ...Object.entries(o)
        .filter(([k]) => !(k in over))
        .map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`),
      ...Object.entries(over)
        .filter(([, v]) => v !== '')
        .map(([k, v]) => `${JSON.stringify(k)}:${v}`),
    ].join(',')}}`;
  return fc.oneof(
    fc.tuple(fc.constantFrom(...keys), hostileJson).map(([k, v]) => toText(valid, { [k]: v })), // one field hostile
    fc
      .tuple(fc.constantFrom(...keys), hostileJson, hostileJson)
      .chain(([k, a, b]) => fc.constantFrom(...keys).map((k2) => toText(valid, { [k]: a, [k2]: b }))),
    fc.constantFrom(...keys).map((k) => toText(valid, { [k]: '' })), // a field missing
    fc
      .tuple(fc.oneof(fc.constantFrom(...KEYS), fc.string({ maxLength: 10 })), hostileJson)
      .map(([k, v]) => toText(valid, { [k]: v })), // unknown key
    fc.tuple(fc.constantFrom(...keys), fc.constantFrom(...keys)).chain(([k, kk]) => {
      const inner = valid[k];
      if (!inner || typeof inner !== 'object') return hostileJson.map((v) => toText(valid, { [kk]: v }));
      if (Array.isArray(inner))
        return hostileJson.map((v) =>
          toText(valid, { [k]: `[${[v, ...inner.slice(1).map((x) => JSON.stringify(x))].join(',')}]` }),
        );
      const ik = Object.keys(inner);
      return fc
        .tuple(fc.constantFrom(...(ik.length ? ik : ['x'])), hostileJson)
        .map(([i, v]) => toText(valid, { [k]: toText(inner as Record<string, unknown>, { [i]: v }) }));
    }),
  );
}

/** whole bodies: hostile JSON, an array for the object, invalid JSON / UTF-8, empty */
const wholeBody: fc.Arbitrary<string | Buffer> = fc.oneof(
  { weight: 4, arbitrary: hostileJson },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '[]',
      '[{}]',
      '"text"',
      '{',
      '{"a":}',
      '\u0000',
      'null',
      '{"a":1,"a":2}',
      '{"text":"\\ud800"}',
      '{"model_id":"\\uDFFF"}',
    ),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)) },
);

// ---- paths ---------------------------------------------------------------------------------------
const segment: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constant('').map(() => randomUUID()) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '%ZZ',
      '%',
      '%E0%A4%A',
      '%ED%A0%80',
      '%00',
      '..',
      '.',
      'a%2Fb',
      '%F0%9F%A6%9C',
      'UPPER',
      '00000000-0000-0000-0000-000000000000',
    ),
  },
  { weight: 1, arbitrary: fc.constantFrom(4093, 4097, 9000).map((n) => 'a'.repeat(n)) },
  { weight: 2, arbitrary: fc.string({ maxLength: 12 }).map((s) => encodeURIComponent(s) || 'x') },
);
const query: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  {
    weight: 2,
    arbitrary: fc
      .array(
        fc.tuple(
          fc.constantFrom(
            'limit',
            'offset',
            'status',
            'task',
            'latency_min',
            'latency_max',
            'since',
            'until',
            'supports_inference',
            'task_type',
            'before_id',
            'after_id',
            'project_id',
            'model_id',
            'llmaj_score_min',
          ),
          fc.oneof(
            fc.constantFrom(
              '1e400',
              '-1',
              '%ZZ',
              'abc',
              'true',
              '2026-13-45',
              'NaN',
              '0x10',
              '99999999999999999999',
              '',
            ),
            fc.string({ maxLength: 8 }).map(encodeURIComponent),
          ),
        ),
        { maxLength: 3 },
      )
      .map((kv) => '?' + kv.map(([k, v]) => `${k}=${v}`).join('&')),
  },
);

export interface JsonCase {
  method: string;
  path: string;
  route: string;
  body?: string | Buffer;
  messagesHeader: boolean;
  auth: 'key' | 'session' | 'none';
}

function routeCase(r: RouteDef): fc.Arbitrary<JsonCase> {
  const id = `${r.method} ${r.path}`;
  const valid = VALID[id];
  const pathArb = fc.tuple(...[...r.path.matchAll(/:[A-Za-z_]+|\*/g)].map(() => segment), query).map((vals) => {
    let i = 0;
    const q = vals[vals.length - 1] as string;
    return r.path.replace(/:[A-Za-z_]+|\*/g, () => vals[i++] as string) + q;
  });
  const bodyArb: fc.Arbitrary<string | Buffer | undefined> =
    r.method === 'GET'
      ? fc.constant(undefined)
      : valid
        ? fc.oneof(
            { weight: 1, arbitrary: fc.constant(JSON.stringify(valid())) },
            { weight: 5, arbitrary: mutate(valid()) },
            { weight: 2, arbitrary: wholeBody },
          )
        : wholeBody;
  const auth =
    r.path === '/auth/logout' ? 'none' : r.auth === 'session' ? 'session' : r.auth === 'none' ? 'none' : 'key';
  return fc
    .record({
      path: pathArb,
      body: bodyArb,
      messagesHeader: r.path.startsWith('/v1/') ? fc.boolean() : fc.constant(false),
    })
    .map(({ path, body, messagesHeader }) => ({ method: r.method, path, route: id, body, messagesHeader, auth }));
}

/** `perRoute` seeded cases for every route of the table */
export function jsonCases(seed: number, perRoute: number): JsonCase[] {
  return routeTable().flatMap((r, i) => fc.sample(routeCase(r), { seed: seed + i, numRuns: perRoute }));
}

export interface Finding {
  what: string;
  repro: string;
  route?: string;
}

/** one line per kind of finding (its first repro and how often it was seen), at most `max` lines */
export function summarize(findings: Finding[], max = 40): string {
  const kinds = new Map<string, { f: Finding; n: number }>();
  for (const f of findings) {
    const k = f.what.slice(0, 60) + ' @ ' + (f.route ?? f.repro.split(' ').slice(0, 2).join(' ').slice(0, 60));
    const e = kinds.get(k);
    if (e) e.n++;
    else kinds.set(k, { f, n: 1 });
  }
  return (
    [...kinds.values()]
      .slice(0, max)
      .map(({ f, n }) => `\n  [${n}x] ${f.what.slice(0, 160)}\n      repro: ${f.repro}`)
      .join('') + (kinds.size > max ? `\n  ... ${kinds.size - max} more kinds` : '')
  );
}
const show = (c: JsonCase) =>
  `${c.method} ${c.path.slice(0, 160)}${c.path.length > 160 ? `…(${c.path.length})` : ''}` +
  `${c.messagesHeader ? ' [messages-version]' : ''} ${showBody(c.body)}`;
const showBody = (b: JsonCase['body']) => {
  if (b === undefined) return '';
  if (Buffer.isBuffer(b)) return `<${b.length} bytes>`;
  return b.length > 200 ? `${b.slice(0, 200)}…(${b.length} chars)` : b;
};

export interface FuzzStats {
  sent: number;
  byStatus: Record<number, number>;
  findings: Finding[];
  crashes: number;
  maxMs: number;
}

/**
 * Sends the cases `concurrency` at a time. Each must be answered within `boundMs` with a status
 * below 500 (or a documented 503/529) and an error body of the documented shape. When the process
 * dies, the cases in flight are reported and it is restarted on the same data dir.
 */
export async function runJsonCases(
  srv: ServerProcess,
  sess: Session,
  cases: JsonCase[],
  opts: { boundMs: number; concurrency: number },
): Promise<FuzzStats> {
  const stats: FuzzStats = { sent: 0, byStatus: {}, findings: [], crashes: 0, maxMs: 0 };
  let next = 0;
  const inflight = new Set<JsonCase>();
  async function one(c: JsonCase): Promise<void> {
    const headers: Record<string, string> = {};
    if (c.auth === 'key') headers['X-API-Key'] = sess.key;
    if (c.auth === 'session') {
      headers.Cookie = sess.cookie;
      headers['X-CSRF-Token'] = sess.csrf;
    }
    if (c.messagesHeader) headers['messages-version'] = '2023-06-01';
    if (c.body !== undefined) headers['Content-Type'] = 'application/json';
    const t0 = Date.now();
    inflight.add(c);
    try {
      const r = await fetch(srv.url + c.path, {
        method: c.method,
        headers,
        body: c.body as BodyInit | undefined,
        signal: AbortSignal.timeout(opts.boundMs),
      });
      const text = await r.text();
      stats.maxMs = Math.max(stats.maxMs, Date.now() - t0);
      stats.byStatus[r.status] = (stats.byStatus[r.status] ?? 0) + 1;
      let body: unknown = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        body = text;
      }
      const p =
        r.status >= 400 ? errorBodyProblem(errorFamily(c.path, c.messagesHeader), r.status, body, r.headers) : null;
      if (p) stats.findings.push({ what: `${p}: ${text.slice(0, 200)}`, repro: show(c), route: c.route });
    } catch (e) {
      const err = e as Error;
      if (err.name === 'TimeoutError')
        stats.findings.push({ what: `no answer within ${opts.boundMs} ms`, repro: show(c), route: c.route });
      else {
        await new Promise((r) => setTimeout(r, 300)); // a dead process: let its exit be seen first
        if (!srv.exited)
          stats.findings.push({
            what: `request failed: ${(err.cause as Error)?.message ?? err.message}`,
            repro: show(c),
            route: c.route,
          });
      }
    } finally {
      inflight.delete(c);
      stats.sent++;
    }
  }
  let restarting: Promise<unknown> | null = null;
  async function worker(): Promise<void> {
    while (next < cases.length) {
      if (restarting) await restarting;
      const c = cases[next++];
      await one(c);
      if (srv.exited && !restarting) {
        stats.crashes++;
        const exit = await srv.exit;
        stats.findings.push({
          what:
            `server process died (${exit.signal ?? `exit ${exit.code}`}); ` +
            `in flight: ${[c, ...inflight].map(show).join(' | ')}`,
          repro: `last output: ${srv.output.slice(-400).replace(/\s+/g, ' ')}`,
        });
        restarting = srv.start().then(() => {
          restarting = null;
        });
        await restarting;
      }
    }
  }
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  return stats;
}

// ---- raw framing over net sockets ----------------------------------------------------------------
export interface RawCase {
  name: string;
  bytes: Buffer;
}

const CRLF = '\r\n';
const methodArb = fc.constantFrom(
  'GET',
  'GET',
  'POST',
  'get',
  'POST',
  'Get',
  'FOO',
  'GET GET',
  '',
  'G\u0000T',
  'CONNECT',
  'OPTIONS',
  'HEAD',
  'DELETE',
  'TRACE',
);
const targetArb = fc.constantFrom(
  '/health',
  '/health',
  '/v1/models',
  '/projects',
  'http://127.0.0.1/health',
  'http://evil.example/health',
  '*',
  '/%ZZ',
  '/v1/models/%ZZ',
  '/felix/datasets/%ZZ',
  '',
  '//',
  '/health?%ZZ=1',
  '/' + 'a'.repeat(10_000),
  '/health#frag',
  '/\u00e9',
  ' /health',
);
const versionArb = fc.constantFrom(
  'HTTP/1.1',
  'HTTP/1.1',
  'HTTP/1.1',
  'HTTP/1.0',
  'HTTP/1.2',
  'HTTP/2.0',
  'HTTP/9.9',
  'http/1.1',
  '',
  'HTTP/1.1 extra',
  'HTTP/',
);
const headerArb: fc.Arbitrary<string[]> = fc.oneof(
  fc.constant([] as string[]),
  fc.array(
    fc
      .tuple(
        fc.constantFrom('X-A', 'Accept', 'X-Api-Key', 'Cookie', 'User-Agent', 'Bad Name', 'X:Y', '', 'X\u0001'),
        fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('\u0001\u0002', '\u007f', 'a\rb', 'x'.repeat(9000))),
      )
      .map(([k, v]) => `${k}: ${v}`),
    { maxLength: 6 },
  ),
  fc.constantFrom(101, 150, 500).map((n) => Array.from({ length: n }, (_, i) => `X-H${i}: v`)),
);
const framingArb = fc.constantFrom(
  [],
  [],
  [],
  ['Content-Length: 2'],
  ['Content-Length: abc'],
  ['Content-Length: -1'],
  ['Content-Length: 99999999999999999999'],
  ['Content-Length: 5', 'Content-Length: 6'],
  ['Content-Length: 4', 'Transfer-Encoding: chunked'],
  ['Transfer-Encoding: chunked'],
  ['Transfer-Encoding: gzip'],
  ['Transfer-Encoding: chunked, chunked'],
  ['Content-Length: 1e3'],
  ['Content-Length:  4 '],
  ['Expect: 100-continue', 'Content-Length: 4'],
);
const bodyArb = fc.constantFrom(
  '',
  '',
  '{}',
  '{}',
  'zz\r\n',
  '4\r\n{}{}\r\n0\r\n\r\n',
  'ffffffffffffffff\r\nx\r\n',
  '0\r\n\r\n',
  'not json',
);

export const rawCaseArb: fc.Arbitrary<RawCase> = fc
  .record({
    method: methodArb,
    target: targetArb,
    version: versionArb,
    host: fc.constantFrom(
      'Host: 127.0.0.1',
      'Host: 127.0.0.1',
      'Host: 127.0.0.1',
      '',
      'Host: ',
      'Host: a\u0001b',
      'Host: x\r\nHost: y',
    ),
    headers: headerArb,
    framing: framingArb,
    body: bodyArb,
    eol: fc.constantFrom(CRLF, CRLF, CRLF, '\n'),
  })
  .map((p) => {
    const lines = [
      `${p.method} ${p.target} ${p.version}`.trimEnd(),
      ...(p.host ? [p.host] : []),
      ...p.headers,
      ...p.framing,
    ];
    const text = lines.join(p.eol) + p.eol + p.eol + p.body;
    const name =
      `${JSON.stringify(`${p.method} ${p.target.slice(0, 40)} ${p.version}`)} host=${JSON.stringify(p.host)} ` +
      `headers=${p.headers.length} framing=${JSON.stringify(p.framing)} body=${JSON.stringify(p.body)} ` +
      `eol=${JSON.stringify(p.eol)}`;
    return { name, bytes: Buffer.from(text, 'latin1') };
  });

export const rawCases = (seed: number, n: number) => fc.sample(rawCaseArb, { seed, numRuns: n });

/** one raw exchange: the status line of the first answer, or why there was none */
export function rawExchange(
  port: number,
  bytes: Buffer,
  boundMs: number,
): Promise<{ status: number | null; closedWithoutAnswer: boolean; timedOut: boolean; head: string }> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    let got = '';
    let done = false;
    const finish = (timedOut: boolean, closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(got);
      resolve({
        status: m ? Number(m[1]) : null,
        closedWithoutAnswer: closed && !m,
        timedOut: timedOut && !m,
        head: got.slice(0, 120),
      });
    };
    const timer = setTimeout(() => finish(true, false), boundMs);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => {
      got += d.toString('latin1');
      if (/\r\n\r\n/.test(got)) finish(false, false);
    });
    s.on('error', () => finish(false, true));
    s.on('close', () => finish(false, true));
  });
}

/**
 * HTTP's own answers to a request the server does not take, which the protocol numbers 5xx (RFC
 * 9110): 501 for an unknown transfer coding, 505 for an HTTP version other than 1.x. They are the
 * guard's documented refusals, not server errors.
 */
const PROTOCOL_5XX = new Set([501, 505]);

/**
 * Every raw request must get an HTTP answer (a 4xx, 501/505 for what HTTP says so, or a normal
 * answer for a request that is valid HTTP) within `boundMs`, and no other 5xx. Returns the findings.
 */
export async function runRawCases(
  srv: ServerProcess,
  cases: RawCase[],
  opts: { boundMs: number; concurrency: number },
): Promise<{ findings: Finding[]; byStatus: Record<string, number> }> {
  const findings: Finding[] = [];
  const byStatus: Record<string, number> = {};
  let next = 0;
  const port = Number(new URL(srv.url).port);
  async function worker() {
    while (next < cases.length) {
      const c = cases[next++];
      const r = await rawExchange(port, c.bytes, opts.boundMs);
      const k = r.status ?? (r.timedOut ? 'timeout' : 'closed');
      byStatus[k] = (byStatus[k] ?? 0) + 1;
      if (r.status === null)
        findings.push({
          what: r.timedOut ? `no answer within ${opts.boundMs} ms` : 'connection closed without an answer',
          repro: c.name,
          route: c.name.slice(0, 12),
        });
      else if (r.status >= 500 && !PROTOCOL_5XX.has(r.status)) findings.push({ what: `status ${r.status}`, repro: c.name });
      if (srv.exited) {
        findings.push({ what: 'server process died', repro: c.name });
        await srv.start();
      }
    }
  }
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  return { findings, byStatus };
}
