// An inference node's internal endpoint (protocol.ts): a plain node:http server over the node's
// ModelRuntime (runtime-local.ts), on its own port. Every request needs the node secret; anything
// else is 401 before the body is read. Calls past `maxQueue` in progress are refused with 529 so the
// API tries another node. A generation is cancelled when the API asks (`cancel`, which lets the node
// report what was processed, for billing) or when the API's connection goes away.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ModelRuntime } from '../runtime.ts';
import { errorToWire, NODE_PATHS, secretChecker, type WireError } from './protocol.ts';

export interface NodeServerOptions {
  runtime: ModelRuntime;
  secret: string;
  host: string;
  port: number;
  /** calls run or queued at once; past it 529 */
  maxQueue: number;
  /** largest request body (the API already bounded what it forwards) */
  maxBodyBytes?: number;
  log?: { warn(o: object, m?: string): void };
}

/** calls served, per kind (GET /internal/v1/status) */
export interface NodeCounters {
  generate: number; extract: number; embed: number; count_tokens: number; cancelled: number;
}

export interface NodeServer {
  url: string;
  port: number;
  /** calls in progress */
  inflight(): number;
  counters: NodeCounters;
  /** stops accepting; waits up to `timeoutMs` for calls in progress, then closes their connections */
  close(timeoutMs?: number): Promise<void>;
}

class HttpError extends Error {
  constructor(readonly status: number, message: string) { super(message); }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

const sendError = (res: ServerResponse, status: number, e: WireError) => sendJson(res, status, { error: e });

async function readJson(req: IncomingMessage, limit: number): Promise<any> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of req) {
    n += (c as Buffer).length;
    if (n > limit) throw new HttpError(413, `request body over ${limit} bytes`);
    chunks.push(c as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpError(400, 'request body is not valid JSON');
  }
}

export async function startNodeServer(opts: NodeServerOptions): Promise<NodeServer> {
  const { runtime } = opts;
  const authorized = secretChecker(opts.secret);
  const limit = opts.maxBodyBytes ?? 64 * 1024 * 1024;
  const counters: NodeCounters = { generate: 0, extract: 0, embed: 0, count_tokens: 0, cancelled: 0 };
  /** generations in progress by the API's call id */
  const calls = new Map<string, AbortController>();
  let inflight = 0;

  /** a model call: counted against maxQueue while it runs */
  async function admitted<T>(fn: () => Promise<T>): Promise<T> {
    if (inflight >= opts.maxQueue) {
      throw Object.assign(new Error(`inference node is at capacity (${opts.maxQueue} calls)`),
        { name: 'OverloadedError', status: 529, code: 'overloaded' });
    }
    inflight++;
    try { return await fn(); } finally { inflight--; }
  }

  async function generate(req: IncomingMessage, res: ServerResponse, body: any): Promise<void> {
    const ac = new AbortController();
    const callId = typeof body.call_id === 'string' ? body.call_id : null;
    if (callId) calls.set(callId, ac);
    // the API went away (its process died, or it gave up): stop generating for nobody
    res.on('close', () => { if (!res.writableFinished) ac.abort(); });
    if (inflight >= opts.maxQueue) {
      if (callId) calls.delete(callId);
      return sendError(res, 529, { name: 'OverloadedError', status: 529, code: 'overloaded',
        message: `inference node is at capacity (${opts.maxQueue} calls)` });
    }
    inflight++;
    counters.generate++;
    try {
      const it = runtime.generate(body.ref, { ...body.params, signal: ac.signal })[Symbol.asyncIterator]();
      let first: IteratorResult<unknown>;
      try {
        first = await it.next();
      } catch (err) {
        const w = errorToWire(err);
        return sendError(res, w.status === 529 ? 529 : 500, w);
      }
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      let r = first;
      try {
        while (!r.done) {
          const ev = r.value as { type: string; finish_reason?: string };
          if (ev.type === 'done' && ev.finish_reason === 'cancelled') counters.cancelled++;
          res.write(JSON.stringify(ev) + '\n');
          r = await it.next();
        }
      } catch (err) {
        res.write(JSON.stringify({ type: 'error', error: errorToWire(err) }) + '\n');
      }
      res.end();
    } finally {
      inflight--;
      if (callId) calls.delete(callId);
    }
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '').split('?')[0];
    if (req.method === 'GET' && path === NODE_PATHS.status) {
      return sendJson(res, 200, { stats: runtime.stats(), inflight, counters, models: await runtime.listLocal() });
    }
    if (req.method !== 'POST') throw new HttpError(404, `no ${req.method} ${path} on an inference node`);
    const body = await readJson(req, limit);
    if (!body || typeof body !== 'object') throw new HttpError(400, 'request body must be a JSON object');
    switch (path) {
      case NODE_PATHS.generate: return generate(req, res, body);
      case NODE_PATHS.cancel: {
        const ac = calls.get(body.call_id);
        ac?.abort();
        return sendJson(res, 200, { cancelled: !!ac });
      }
      case NODE_PATHS.extract: {
        counters.extract++;
        const out = await admitted(() => runtime.extract(body.ref, body.texts, body.schema, body.opts));
        return sendJson(res, 200, out);
      }
      case NODE_PATHS.embed: {
        counters.embed++;
        return sendJson(res, 200, await admitted(() => runtime.embed(body.ref, body.texts, body.opts)));
      }
      case NODE_PATHS.countTokens: {
        if (!runtime.countTokens) throw new HttpError(404, 'token counting is not available on this node');
        counters.count_tokens++;
        return sendJson(res, 200, { tokens: await admitted(() => runtime.countTokens!(body.ref, body.params)) });
      }
      case NODE_PATHS.templateTools:
        return sendJson(res, 200, { tools: (await runtime.templateSupportsTools?.(body.ref)) ?? false });
      case NODE_PATHS.warm:
        await runtime.warm(body.ref);
        return sendJson(res, 200, { ready: true });
      case NODE_PATHS.unload:
        runtime.unload?.(body.ref);
        return sendJson(res, 200, { unloaded: true });
      default:
        throw new HttpError(404, `no POST ${path} on an inference node`);
    }
  }

  const server = createServer({ noDelay: true, keepAlive: true }, (req, res) => {
    // the node secret, and nothing else, opens every path: refused before the body is read
    if (!authorized(req.headers.authorization)) {
      res.setHeader('Connection', 'close');
      return sendJson(res, 401, { detail: 'This is an inference node\'s internal endpoint: it needs the node secret '
        + '(API keys are not accepted here)' });
    }
    route(req, res).catch((err) => {
      if (res.headersSent) { res.destroy(); return; }
      if (err instanceof HttpError) return sendJson(res, err.status, { detail: err.message });
      const w = errorToWire(err);
      if (w.status !== 529) opts.log?.warn({ err: w.message, path: req.url }, 'inference node call failed');
      sendError(res, w.status === 529 ? 529 : 500, w);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => { server.off('error', reject); resolve(); });
  });
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    port,
    inflight: () => inflight,
    counters,
    async close(timeoutMs = 15_000) {
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      const deadline = Date.now() + timeoutMs;
      while (inflight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      server.closeAllConnections();
      await closed;
    },
  };
}
