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
