// The service/auto routing policy.
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRoutePolicy, DEFAULT_ROUTER_POLICY, loadRouterPolicy, parseRouterPolicy, routeRequest, type RouterCandidate } from '../../src/service/router.ts';
import { ServiceError } from '../../src/service/errors.ts';

const C: RouterCandidate[] = [
  { id: 'enc-big', kind: 'encoder', price_input_per_1m: 5, local: true },
  { id: 'enc-small', kind: 'encoder', price_input_per_1m: 2, local: true },
  { id: 'dec-small', kind: 'decoder', context_length: 512, price_input_per_1m: 2, price_output_per_1m: 4, local: true },
  { id: 'dec-long', kind: 'decoder', context_length: 32768, price_input_per_1m: 5, price_output_per_1m: 10, local: true, supports_tools: true },
  { id: 'dec-remote', kind: 'decoder', context_length: 131072, price_input_per_1m: 1, price_output_per_1m: 1, local: false, pullable: true },
];
const req = (o: Partial<Parameters<typeof routeRequest>[0]> = {}) => ({ has_schema: false, prompt_chars: 100, max_tokens: 64, needs_tools: false, ...o });

t.test('schema → encoder (cheapest, or the configured one)', async (t) => {
  t.equal(routeRequest(req({ has_schema: true }), C).model, 'enc-small');
  t.equal(routeRequest(req({ has_schema: true }), C, { ...DEFAULT_ROUTER_POLICY, encoder: 'enc-big' }).model, 'enc-big');
  t.throws(() => routeRequest(req({ has_schema: true }), C.filter((c) => c.kind === 'decoder')), { status: 503 } as unknown as Error);
});

t.test('decoders: cheapest that fits the context; not-on-disk models only with allow_pull', async (t) => {
  t.equal(routeRequest(req(), C).model, 'dec-small');
  t.equal(routeRequest(req({ prompt_chars: 3000 }), C).model, 'dec-long', 'a long prompt outgrows the small context');
  t.equal(routeRequest(req(), C, { ...DEFAULT_ROUTER_POLICY, allow_pull: true }).model, 'dec-remote');
  t.equal(routeRequest(req(), C, { ...DEFAULT_ROUTER_POLICY, prefer: 'context' }).model, 'dec-long');
  t.equal(routeRequest(req(), C, { ...DEFAULT_ROUTER_POLICY, prefer: 'order', decoders: ['dec-long', 'dec-small'] }).model, 'dec-long');
  t.equal(routeRequest(req({ needs_tools: true }), C).model, 'dec-long', 'tool-capable models first when tools are asked');
  try {
    routeRequest(req({ prompt_chars: 400_000 }), C);
    t.fail('expected 422');
  } catch (e) {
    t.ok(e instanceof ServiceError);
    t.equal((e as ServiceError).status, 422);
    t.equal((e as ServiceError).code, 'context_length_exceeded');
  }
});

t.test('policy files are validated; the hook reads hints', async (t) => {
  t.throws(() => parseRouterPolicy({ prefer: 'vibes' }));
  t.throws(() => parseRouterPolicy({ unknown_key: 1 }));
  const dir = mkdtempSync(join(tmpdir(), 'loom-router-'));
  const f = join(dir, 'router.json');
  writeFileSync(f, JSON.stringify({ prefer: 'context', context_headroom: 0.1 }));
  const p = loadRouterPolicy(f);
  t.equal(p.prefer, 'context');
  t.equal(p.chars_per_token, DEFAULT_ROUTER_POLICY.chars_per_token);
  const hook = createRoutePolicy(DEFAULT_ROUTER_POLICY);
  const entries = [
    { id: 'e', task_type: 'encoder', supports_inference: true, supports_on_demand_inference: true, pricing: { input: 1, output: 0 }, context_length: 512, local: true },
    { id: 'd', task_type: 'decoder', supports_inference: true, supports_on_demand_inference: true, pricing: { input: 1, output: 2 }, context_length: 512, local: true },
    { id: 'train-only', task_type: 'decoder', supports_inference: false, supports_on_demand_inference: false, pricing: { input: 0, output: 0 }, context_length: 99999, local: true },
  ] as unknown as Parameters<typeof hook>[2];
  t.equal(hook('encoder', { schema: ['x'] }, entries), 'e');
  t.equal(hook('decoder', { messages: [{ role: 'user', content: 'hi' }] }, entries), 'd');
  t.equal(hook('decoder', { messages: [] }, [entries[0]!]), null, 'nothing available → null (503 upstream)');
});

// The policy is installed once, by createServices, for every endpoint that routes: POST /inference
// uses it from the first request, and a /gliner-2 or /v1 request does not replace it.
t.test('service/auto: one policy from creation on, on /inference, /gliner-2 and /v1', async (t) => {
  const { mkdtempSync: mk, rmSync } = await import('node:fs');
  const { createServices } = await import('../../src/service/index.ts');
  const { createServer } = await import('../../server/index.ts');
  const { createLogger } = await import('../../server/log.ts');
  const { FakeRuntime } = await import('../service/fake-runtime.ts');
  const { call, makeUser } = await import('../service/helpers.ts');
  const runtime = new FakeRuntime();
  // two encoders: the default policy takes the first (cheapest, then by id), the policy the second
  runtime.local.push({ id: 'test/encoder-b', kind: 'encoder', dir: '/nonexistent/encoder-b' });
  const start = async (opts: { routerPolicy?: ReturnType<typeof parseRouterPolicy> }) => {
    const dataDir = mk(join(tmpdir(), 'loom-router-svc-'));
    const services = await createServices({ runtime, config: { dataDir, workerThreads: 1 }, ...opts });
    const server = await createServer({ services, log: createLogger({ level: 'silent' }) });
    const ts = { server, url: server.url, runtime, dataDir, services,
      async close() { await server.close({ timeoutMs: 2000 }); rmSync(dataDir, { recursive: true, force: true }); } };
    return { ts, user: await makeUser(ts, { credits: 100 }) };
  };
  const body = { model_id: 'service/auto', text: 'Alice went to Paris', schema: ['person'] };
  const routed = async (ts: { url: string }, key: string, path = '/inference') => {
    const b = path === '/inference' ? body : { text: body.text, entities: ['person'] };
    const r = await call(ts.url, 'POST', path, { key, body: b });
    t.equal(r.status, 200, `${path} answers`);
    return r.body.routed_model;
  };

  // LOOM_ROUTER_POLICY, read at creation: the very first request is routed by it
  const dir = mkdtempSync(join(tmpdir(), 'loom-router-'));
  const file = join(dir, 'router.json');
  writeFileSync(file, JSON.stringify({ encoder: 'test/encoder-b' }));
  const saved = process.env.LOOM_ROUTER_POLICY;
  process.env.LOOM_ROUTER_POLICY = file;
  const a = await start({}).finally(() => {
    if (saved === undefined) delete process.env.LOOM_ROUTER_POLICY;
    else process.env.LOOM_ROUTER_POLICY = saved;
  });
  t.equal(await routed(a.ts, a.user.key), 'test/encoder-b', 'POST /inference: the env policy from the first request');
  await a.ts.close();

  // a policy given to createServices stays after /gliner-2 and /v1 requests (they used to re-install the env's)
  const b = await start({ routerPolicy: parseRouterPolicy({ encoder: 'test/encoder-b' }) });
  t.equal(await routed(b.ts, b.user.key), 'test/encoder-b', 'POST /inference: the given policy');
  t.equal(await routed(b.ts, b.user.key, '/gliner-2/extract-entities'), 'test/encoder-b', '/gliner-2: the same policy');
  const chat = await call(b.ts.url, 'POST', '/v1/chat/completions', {
    key: b.user.key, body: { model: 'service/auto', messages: [{ role: 'user', content: 'hi there' }], max_tokens: 4 },
  });
  t.equal(chat.status, 200, '/v1/chat/completions through the router');
  t.equal(await routed(b.ts, b.user.key), 'test/encoder-b', 'POST /inference after /gliner-2 and /v1: the same policy');
  // without a policy the default applies (so the checks above do tell the two apart)
  const c = await start({ routerPolicy: DEFAULT_ROUTER_POLICY });
  t.equal(await routed(c.ts, c.user.key), 'test/encoder', 'the default policy picks the other encoder');
  await b.ts.close();
  await c.ts.close();
});
