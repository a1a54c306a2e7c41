// The compatibility endpoints: OpenAI-style /v1/chat/completions, /v1/completions, /v1/responses,
// /v1/models, /v1/embeddings and the messages-style /v1/messages (+ /v1/messages/count_tokens).
// Thin adapters over src/service/compat/call.ts: one service call per request; a streaming reply's
// frames are written as they come, each write awaiting uWS back-pressure (onWritable). When the
// client goes away the loop stops reading, which ends the service's stream (it cancels the
// generation at once, frees its KV blocks and bills what was processed).
import type { CompatEndpoint } from '../../src/service/compat/call.ts';
import { COMPAT_PATHS } from '../../src/service/compat/call.ts';
import { SSE_HEADERS } from '../http.ts';
import { reply, type Ctx, type RouteDef } from '../router.ts';

async function handleGeneration(ctx: Ctx, endpoint: CompatEndpoint): Promise<unknown> {
  const out = await ctx.services.compat.generate(ctx.principal!, endpoint, ctx.body, { signal: ctx.signal });
  if (!out.stream) return out.body;
  const stream = ctx.stream(200, SSE_HEADERS);
  for await (const frame of out.frames) {
    if (stream.closed) break;
    await stream.write(frame);
  }
  stream.end();
  return undefined;
}

const JSON_TYPE = { 'Content-Type': 'application/json' };
const jsonBody = (body: string | Uint8Array) => reply(200, body, JSON_TYPE);

export function compatRoutes(): RouteDef[] {
  const gen = (endpoint: CompatEndpoint): RouteDef => ({
    method: 'POST',
    path: COMPAT_PATHS[endpoint],
    auth: 'key',
    errors: endpoint === 'messages' ? 'native' : 'openai',
    handler: (ctx) => handleGeneration(ctx, endpoint),
  });
  return [
    gen('chat'),
    gen('completions'),
    gen('responses'),
    gen('messages'),
    {
      method: 'POST', path: '/v1/messages/count_tokens', auth: 'key', errors: 'native',
      handler: ({ services, principal, body }) => services.compat.countTokens(principal!, body),
    },
    {
      method: 'POST', path: '/v1/embeddings', auth: 'key', errors: 'openai',
      handler: ({ services, principal, body }) => services.compat.embeddings(principal!, body),
    },
    {
      method: 'GET', path: '/v1/models', auth: 'key', errors: 'openai',
      query: { limit: { type: 'integer', min: 1 }, before_id: { type: 'string' }, after_id: { type: 'string' } },
      // synchronous while the catalog snapshot is fresh (server/router.ts answers it in uWS's call)
      handler: ({ services, principal, query }) => {
        const body = services.compat.models(principal!, query as Parameters<typeof services.compat.models>[1]);
        return body instanceof Promise ? body.then(jsonBody) : jsonBody(body);
      },
    },
    {
      // model ids contain '/', sent percent-encoded by the SDKs
      method: 'GET', path: '/v1/models/*', auth: 'key', errors: 'openai', name: '/v1/models/:id',
      handler: (ctx) =>
        ctx.services.compat.model(ctx.principal!, decodeURIComponent(ctx.url.slice('/v1/models/'.length))),
    },
  ];
}
