// The HTTP layer itself: /health, /metrics, unknown routes, 405, 413, 400, large bodies through the
// worker pool, streaming with back-pressure and disconnects, logs without secrets, graceful shutdown.
import t from 'tap';
import { Writable } from 'node:stream';
import { request } from 'node:http';
import { call, makeUser, startServer } from './helpers.ts';
import { reply, type RouteDef } from '../../server/index.ts';
import { SSE_HEADERS } from '../../server/http.ts';
import { createServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';

const logs: string[] = [];
const sink = new Writable({ write(c, _e, cb) { logs.push(String(c)); cb(); } });
const ts = await startServer({ logDestination: sink, config: { maxBodyBytes: 64 * 1024, workerParseBytes: 2048 } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });

t.test('/health and /metrics', async (t) => {
  const h = await call(ts.url, 'GET', '/health');
  t.equal(h.status, 200);
  t.match(h.body, { status: 'ok', store: 'ok', queue_depth: 0 });
  await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'Alice', schema: ['person'] } });
  const m = await call(ts.url, 'GET', '/metrics');
  t.equal(m.status, 200);
  t.match(m.headers.get('content-type'), /text\/plain/);
  t.match(m.text, /loom_http_requests_total\{route="\/inference",method="POST",status="200"\} 1/);
  t.match(m.text, /loom_http_request_duration_seconds_bucket\{le="[^"]+",route="\/inference"/);
  t.match(m.text, /loom_tokens_total\{model="test\/encoder",kind="prompt"\} 2/);
  t.match(m.text, /loom_inference_inflight 0/);
  t.match(m.text, /loom_prompt_cache_hit_ratio 0/);
  t.match(m.text, /loom_runtime_queue_depth 0/);
});

t.test('404 for unknown routes, 405 for a known path with the wrong method', async (t) => {
  const r = await call(ts.url, 'GET', '/nope', { key: u.key });
  t.equal(r.status, 404);
  t.same(Object.keys(r.body), ['detail']);
  const m = await call(ts.url, 'PUT', '/projects', { key: u.key, body: {} });
  t.equal(m.status, 405);
  t.match(m.headers.get('allow'), /GET/);
});

t.test('413 past the body limit (declared or streamed), 400 for malformed JSON', async (t) => {
  const big = JSON.stringify({ model_id: 'test/encoder', text: 'a'.repeat(70 * 1024), schema: ['x'] });
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, raw: big });
  t.equal(r.status, 413);
  t.same(Object.keys(r.body), ['detail']);
  // chunked upload without a content-length
  const status = await new Promise<number>((resolve, reject) => {
    const req = request(ts.url + '/inference', { method: 'POST', headers: { 'X-API-Key': u.key, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' } }, (res) => { res.resume(); resolve(res.statusCode!); });
    req.on('error', reject);
    for (let i = 0; i < 80; i++) req.write('x'.repeat(1024));
    req.end();
  });
  t.equal(status, 413);
  const bad = await call(ts.url, 'POST', '/projects', { key: u.key, raw: '{"name": ' });
  t.equal(bad.status, 400);
  t.same(Object.keys(bad.body), ['detail']);
});

t.test('bodies above the worker threshold are parsed and validated in the Piscina pool', async (t) => {
  const texts = Array.from({ length: 200 }, (_, i) => `Alice number ${i}`);
  const ok = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: texts, schema: ['person'] } });
  t.equal(ok.status, 200);
  t.equal(ok.body.result.length, 200);
  const invalid = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: [...texts, 7], schema: ['person'] } });
  t.equal(invalid.status, 422);
  t.ok(invalid.body.errors.some((e: { path: string }) => e.path === '/text/200'));
  const broken = await call(ts.url, 'POST', '/inference', { key: u.key, raw: JSON.stringify({ text: texts }).slice(0, -2) });
  t.equal(broken.status, 400);
  const f1 = await ts.services.workers.spanF1([[[0, 5, 'person'], [10, 15, 'city']]], [[[0, 5, 'person'], [10, 14, 'city']]]);
  t.match(f1, { tp: 1, fp: 1, fn: 1, precision: 0.5, recall: 0.5, f1: 0.5 });
  t.equal(f1.per_label.person.f1, 1);
});

t.test('logs carry no secrets', async (t) => {
  const text = logs.join('');
  t.ok(text.includes('"route":"/inference"'), 'requests are logged');
  t.notOk(text.includes(u.key), 'no API key');
  t.notOk(text.includes(u.key.slice(8)), 'no part of the key secret');
  t.notOk(text.includes(u.cookie.split('=')[1]), 'no session token');
  t.notOk(text.includes(u.csrf), 'no CSRF token');
  t.notOk(text.includes('correct horse battery'), 'no password');
});

t.test('the access log line is the line pino writes for the same fields; lines are flushed on close', async (t) => {
  await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  await new Promise((r) => setTimeout(r, 60)); // batches are at most 25 ms apart
  const lines = logs.join('').split('\n').filter((l) => l.includes('"route":"/list-api-keys"'));
  t.ok(lines.length >= 1, 'the request is logged');
  const line = JSON.parse(lines.at(-1)!);
  t.same(Object.keys(line), ['level', 'time', 'service', 'method', 'route', 'status', 'ms', 'team_id', 'key_id', 'msg']);
  t.match(line, { level: 30, service: 'loom', method: 'GET', route: '/list-api-keys', status: 200, team_id: u.team_id, key_id: u.key_id, msg: 'request' });
  t.ok(Math.abs(line.time - Date.now()) < 5000 && typeof line.ms === 'number');
  // the same fields through pino itself give the same line
  const out: string[] = [];
  const pinoLog = createLogger({ level: 'info', destination: new Writable({ write(c, _e, cb) { out.push(String(c)); cb(); } }) });
  pinoLog.info({ method: 'GET', route: '/list-api-keys', status: 200, ms: line.ms, team_id: u.team_id, key_id: u.key_id }, 'request');
  await new Promise((r) => setImmediate(r));
  t.same(JSON.parse(out[0]!), { ...line, time: JSON.parse(out[0]!).time });

  // a server closed right after a request still writes its line
  const own: string[] = [];
  const srv = await createServer({ services: ts.services, log: createLogger({ level: 'info', destination: new Writable({ write(c, _e, cb) { own.push(String(c)); cb(); } }) }) });
  await call(srv.url, 'GET', '/health');
  await srv.close({ keepServices: true });
  t.ok(own.join('').includes('"route":"/health","status":200'), 'flushed by close()');
});

t.test('streaming: back-pressure waits for the reader; a disconnect aborts the handler', async (t) => {
  const chunk = 'x'.repeat(256 * 1024);
  const state = { written: 0, aborted: false, maxAhead: 0 };
  const routes: RouteDef[] = [{
    method: 'GET', path: '/test/stream', auth: 'none',
    async handler(ctx) {
      const s = ctx.stream(200, SSE_HEADERS);
      ctx.signal.addEventListener('abort', () => { state.aborted = true; });
      for (let i = 0; i < 400 && !s.closed; i++) { await s.sse({ i, chunk }); state.written++; }
      s.end('data: [DONE]\n\n');
    },
  }, { method: 'GET', path: '/test/boom', auth: 'none', handler() { throw new Error('secret internals'); } },
  { method: 'GET', path: '/test/slow', auth: 'none', async handler() { await new Promise((r) => setTimeout(r, 300)); return reply(200, { slow: true }); } }];
  const srv = await createServer({ services: ts.services, log: createLogger({ level: 'silent' }), routes });
  const boom = await call(srv.url, 'GET', '/test/boom');
  t.equal(boom.status, 500);
  t.same(Object.keys(boom.body).sort(), ['error', 'message']);
  t.notOk(boom.text.includes('secret internals'));

  const res = await fetch(srv.url + '/test/stream');
  t.equal(res.headers.get('content-type'), 'text/event-stream');
  const reader = res.body!.getReader();
  const first = await reader.read();
  t.match(new TextDecoder().decode(first.value), /^data: \{"i":0/);
  await new Promise((r) => setTimeout(r, 300));
  const ahead = state.written;
  t.ok(ahead < 400, `the writer paused for a reader that does not read (${ahead} of 400 events written)`);
  await reader.cancel();
  await new Promise((r) => setTimeout(r, 200));
  t.ok(state.aborted, 'the handler saw the disconnect');
  t.ok(state.written < 400, 'and stopped writing');

  // graceful shutdown: in-flight requests finish, then the port closes
  const slow = call(srv.url, 'GET', '/test/slow');
  await new Promise((r) => setTimeout(r, 50));
  const closing = srv.close({ timeoutMs: 5000, keepServices: true });
  t.same((await slow).body, { slow: true }, 'the in-flight request completed');
  await closing;
  await t.rejects(fetch(srv.url + '/health'), 'no longer listening');
});
