// The ModelRuntime of an API process that holds no models (LOOM_ROLE without 'inference'): every call
// goes to a live inference node (registry.ts, protocol.ts) that holds the model.
//   choice: the nodes holding the model (on disk, loaded or loading; a trained model's full weights
//   are in the shared artifacts folder, so any node), least queue depth first (the depth of its last
//   heartbeat plus this process's calls to it since), ties to a node that has it loaded; a request
//   that marks a cached prefix (`cache_control`) goes instead to the node rendezvous hashing picks for
//   that prefix among them, so a repeated prefix lands where it is cached (prefixNode).
//   refusals: no live node → 503 with Retry-After (status 'unavailable'); every node holding it at
//   capacity → the runtime's 529 (the services answer 529 on /v1/messages, 503 elsewhere); a node
//   that cannot be reached is left out until its next heartbeat and the call goes to the next one.
//   streaming: the node's events are yielded as they arrive; an aborted `signal` (client gone) asks
//   the node to cancel, and the generation still ends with the node's `done` (finish_reason
//   'cancelled', with the usage processed), which the services bill as they bill a local one.
// Billing, usage and inference records stay in the API process: a node only runs the model.
import { createHash, randomUUID } from 'node:crypto';
import type { InferenceNodeRecord, Store } from '../../store/index.ts';
import { DependencyUnavailableError } from '../errors.ts';
import type {
  EmbedOutput, ExtractOutput, GenerateEvent, GenerateParams, LocalModel, ModelRef, ModelRuntime, ModelStatus,
} from '../runtime.ts';
import { errorFromWire, NODE_PATHS, type WireError, type WireLine } from './protocol.ts';
import { createNodeDirectory, type NodeDirectory } from './registry.ts';

export interface RemoteRuntimeOptions {
  store: Store;
  /** LOOM_NODE_SECRET */
  secret: string;
  /** Retry-After of the 503 when no node can take a model, and of 425 while a node warms one */
  retryAfterS?: number;
  /** how often the registry is read, ms */
  refreshMs?: number;
  log?: { warn(o: object, m?: string): void };
}

/** How long a cancelled generation may take to report its usage before the connection is dropped. */
const CANCEL_GRACE_MS = 10_000;

/** The model id a node must hold to run `ref`: an adapter's base; null for full trained weights (any node). */
function heldId(ref: ModelRef): string | null {
  if (ref.weights === 'adapter' && ref.base_model) return ref.base_model;
  return ref.dir ? null : ref.id;
}

const holds = (n: InferenceNodeRecord, id: string) =>
  n.loaded.includes(id) || n.warming.includes(id) || n.models.some((m) => m.id === id);

/**
 * The prefix a request marks for caching: its messages up to the first block with `cache_control`
 * (the first marker is the one that stays put as a conversation grows), as one string; null when none
 * is marked or the call does not cache.
 */
export function cachedPrefix(p: GenerateParams): string | null {
  if ((p.cache as { mode?: string } | undefined)?.mode === 'none') return null;
  const parts: string[] = [];
  for (const m of p.messages ?? []) {
    if (typeof m.content === 'string') { parts.push(m.role, m.content); continue; }
    for (const b of m.content) {
      parts.push(m.role, b.text);
      if (b.cache_control) return JSON.stringify(parts);
    }
  }
  return null;
}

const score = (key: string, nodeId: string) => createHash('sha256').update(key).update('\0').update(nodeId).digest()
  .readBigUInt64BE(0);

/** Rendezvous (highest random weight) hashing: the node of `nodes` that `key` maps to, stable as nodes come and go. */
export function prefixNode<T extends { id: string }>(key: string, nodes: T[]): T | undefined {
  let best: T | undefined;
  let bestScore = -1n;
  for (const n of nodes) {
    const s = score(key, n.id);
    if (s > bestScore) { best = n; bestScore = s; }
  }
  return best;
}

function overloaded(what: string): Error {
  return Object.assign(new Error(`every inference node holding ${what} is at capacity; retry shortly`),
    { name: 'OverloadedError', status: 529, code: 'overloaded' });
}

/** connection-level failures: the node is not there (left out until it beats again) */
const UNREACHABLE = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'UND_ERR_CONNECT_TIMEOUT']);

async function* ndjson(body: ReadableStream<Uint8Array>): AsyncGenerator<WireLine> {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += dec.decode(chunk, { stream: true });
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line) yield JSON.parse(line) as WireLine;
    }
  }
}

export type RemoteRuntime = ModelRuntime & { directory: NodeDirectory };

export async function createRemoteRuntime(opts: RemoteRuntimeOptions): Promise<RemoteRuntime> {
  const retryAfter = opts.retryAfterS ?? 5;
  const dir = await createNodeDirectory(opts.store, { refreshMs: opts.refreshMs });
  const auth = { Authorization: `Bearer ${opts.secret}`, 'Content-Type': 'application/json' };
  /** calls this process has running on each node */
  const mine = new Map<string, number>();
  /** every model a node registered since this process started, by id */
  const seen = new Map<string, LocalModel>();
  const depth = (n: InferenceNodeRecord) => n.queue_depth + (mine.get(n.id) ?? 0);
  /**
   * models a node answered a call for, by node, with the node's heartbeat counter when it answered: loaded
   * there now, though its record says so only from its next heartbeat on; after that the record is the truth
   */
  const answered = new Map<string, Map<string, number>>();
  const loadedOn = (n: InferenceNodeRecord): string[] => {
    const a = answered.get(n.id);
    if (!a) return n.loaded;
    const extra: string[] = [];
    for (const [id, beat] of a) {
      if (n.beat > beat + 1 || n.beat < beat) a.delete(id); // a later heartbeat, or a restarted node
      else if (!n.loaded.includes(id)) extra.push(id);
    }
    return extra.length ? [...n.loaded, ...extra] : n.loaded;
  };
  const noNode = () => new DependencyUnavailableError('No inference node is live; retry later', retryAfter);

  /** the nodes that can run `ref`, best first (least depth, then loaded, then id); `key` puts its node first */
  function ranked(ref: ModelRef, key: string | null): InferenceNodeRecord[] {
    const live = dir.live();
    const id = heldId(ref);
    let cands = id === null ? live : live.filter((n) => holds(n, id));
    // nobody has it although the status said it could run: let a node load it (or say why not)
    if (!cands.length) cands = live;
    const loaded = (n: InferenceNodeRecord) => (loadedOn(n).includes(id ?? ref.id) ? 0 : 1);
    const order = cands.filter((n) => depth(n) < n.max_queue)
      .sort((a, b) => depth(a) - depth(b) || loaded(a) - loaded(b) || a.id.localeCompare(b.id));
    if (key) {
      const home = prefixNode(createHash('sha256').update(ref.id).update('\n').update(key).digest('hex'), order);
      if (home) return [home, ...order.filter((n) => n !== home)];
    }
    if (!order.length && cands.length) throw overloaded(ref.id);
    return order;
  }

  const count = (id: string, d: number) => { mine.set(id, (mine.get(id) ?? 0) + d); };

  /**
   * POSTs `body` to the best node for `ref`, and to the next on a node that cannot be reached or is
   * at capacity; resolves with the node and its 200 response (any other status is the node's error).
   * The call counts in the node's depth here from its start until `done()`.
   */
  async function send(ref: ModelRef, path: string, body: unknown, key: string | null, signal?: AbortSignal) {
    await dir.refresh(2000);
    const nodes = ranked(ref, key);
    if (!nodes.length) throw noNode();
    const text = JSON.stringify(body);
    let last: unknown = noNode();
    for (const node of nodes) {
      let res: Response;
      count(node.id, 1);
      try {
        res = await fetch(node.url + path, { method: 'POST', headers: auth, body: text, signal });
      } catch (err) {
        count(node.id, -1);
        if (signal?.aborted) throw err;
        const code = (err as { cause?: { code?: string } }).cause?.code ?? '';
        if (UNREACHABLE.has(code)) dir.markDown(node.id);
        const why = String((err as { cause?: unknown }).cause ?? err);
        opts.log?.warn({ node: node.id, err: why }, 'inference node unreachable');
        last = new DependencyUnavailableError(`Inference node ${node.id} is unreachable; retry later`, retryAfter);
        continue;
      }
      if (res.ok) {
        // the node has the model loaded now; stats() and the ranking need not wait for its next heartbeat
        // keyed by the node's heartbeat as this process sees it now, not at the call's start: the heartbeats the
        // node sent while it loaded the model (there may be several) do not list it yet
        if (heldId(ref) === ref.id) {
          const a = answered.get(node.id) ?? new Map<string, number>();
          const beat = dir.live().find((n) => n.id === node.id)?.beat ?? node.beat;
          answered.set(node.id, a.set(ref.id, Math.max(beat, node.beat)));
        }
        return { node, res, done: () => count(node.id, -1) };
      }
      count(node.id, -1);
      const reply = await res.json().catch(() => ({})) as { error?: WireError; detail?: string };
      if (res.status === 529) { last = overloaded(ref.id); continue; }
      if (res.status === 401) {
        throw new DependencyUnavailableError(`Inference node ${node.id} refused this process's node secret `
          + '(LOOM_NODE_SECRET differs)', retryAfter);
      }
      throw reply.error ? errorFromWire(reply.error)
        : new Error(`inference node ${node.id}: ${res.status} ${reply.detail}`);
    }
    throw last;
  }

  /** a call with a JSON answer */
  async function json<T>(ref: ModelRef, path: string, body: unknown, signal?: AbortSignal): Promise<T> {
    const { res, done } = await send(ref, path, body, null, signal);
    try {
      return await res.json() as T;
    } finally {
      done();
    }
  }

  function status(ref: ModelRef): ModelStatus {
    const live = dir.live();
    if (!live.length) return { state: 'unavailable', reason: 'no inference node is live' };
    const id = heldId(ref);
    if (id === null) return { state: 'ready' };
    if (live.some((n) => loadedOn(n).includes(id) || n.models.some((m) => m.id === id))) return { state: 'ready' };
    if (live.some((n) => n.warming.includes(id))) return { state: 'warming', retry_after_s: retryAfter };
    return { state: 'pullable' };
  }

  return {
    directory: dir,
    status,

    // what the nodes hold, live or not: a model whose nodes are all down stays known, so a call to it
    // is a 503 (no node can take it), not a 404
    async listLocal(): Promise<LocalModel[]> {
      await dir.refresh();
      for (const n of dir.all()) for (const m of n.models) if (!seen.has(m.id)) seen.set(m.id, m);
      return [...seen.values()];
    },

    async warm(ref: ModelRef): Promise<void> {
      await json(ref, NODE_PATHS.warm, { ref });
    },

    unload(ref: ModelRef): void {
      for (const n of dir.live()) {
        fetch(n.url + NODE_PATHS.unload, { method: 'POST', headers: auth, body: JSON.stringify({ ref }) })
          .then((r) => r.body?.cancel(), () => { /* a node that is gone holds nothing */ });
      }
    },

    extract(ref, texts, schema, o): Promise<ExtractOutput> {
      const { signal, ...rest } = o;
      return json(ref, NODE_PATHS.extract, { ref, texts, schema, opts: rest }, signal);
    },

    embed(ref, texts, o): Promise<EmbedOutput> {
      return json(ref, NODE_PATHS.embed, { ref, texts, opts: o });
    },

    async countTokens(ref, p): Promise<number> {
      const { signal, ...params } = p;
      return (await json<{ tokens: number }>(ref, NODE_PATHS.countTokens, { ref, params }, signal)).tokens;
    },

    async templateSupportsTools(ref): Promise<boolean> {
      return (await json<{ tools: boolean }>(ref, NODE_PATHS.templateTools, { ref })).tools;
    },

    async *generate(ref: ModelRef, p: GenerateParams): AsyncIterable<GenerateEvent> {
      const { signal, ...params } = p;
      const zero = { prompt_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0 };
      if (signal?.aborted) {
        yield { type: 'done', finish_reason: 'cancelled', stop_sequence: null, text: '', usage: zero };
        return;
      }
      const callId = randomUUID();
      const ac = new AbortController();
      const body = { call_id: callId, ref, params };
      const { node, res, done } = await send(ref, NODE_PATHS.generate, body, cachedPrefix(p), ac.signal);
      let finished = false;
      let grace: NodeJS.Timeout | undefined;
      /** asks the node to stop; it answers with `done` (cancelled, usage so far) on the stream */
      const cancel = () => {
        if (!grace) { grace = setTimeout(() => ac.abort(), CANCEL_GRACE_MS); grace.unref(); }
        const ask = (tries: number): void => {
          const which = JSON.stringify({ call_id: callId });
          fetch(node.url + NODE_PATHS.cancel, { method: 'POST', headers: auth, body: which })
            .then((r) => r.json() as Promise<{ cancelled: boolean }>)
            // the cancel overtook the generation on its way in: ask again shortly
            .then((r) => { if (!r.cancelled && !finished && tries > 0) setTimeout(() => ask(tries - 1), 50); })
            .catch(() => { ac.abort(); });
        };
        ask(20);
      };
      signal?.addEventListener('abort', cancel, { once: true });
      if (signal?.aborted) cancel(); // aborted while the node processed the prompt (before its first event)
      let failure: Error | null = null;
      try {
        for await (const line of ndjson(res.body!)) {
          if (line.type === 'error') {
            failure = errorFromWire((line as { error: WireError }).error);
            break;
          }
          if (line.type === 'done') finished = true;
          yield line as unknown as GenerateEvent;
          if (finished) return;
        }
        failure ??= new Error(`inference node ${node.id} ended the generation without its result`);
      } catch (err) {
        // the connection broke: the node died, or it did not report a cancelled call within the grace period
        if (signal?.aborted) {
          finished = true;
          yield { type: 'done', finish_reason: 'cancelled', stop_sequence: null, text: '', usage: zero };
          return;
        }
        failure = new Error(`inference node ${node.id} failed during the generation: ${(err as Error).message}`);
      } finally {
        signal?.removeEventListener('abort', cancel);
        done();
        // the consumer stopped reading: the closed connection stops the node generating for nobody
        if (!finished && !failure) ac.abort();
        if (grace) clearTimeout(grace);
      }
      throw failure;
    },

    stats() {
      const live = dir.live();
      const uniq = (xs: string[]) => [...new Set(xs)];
      return {
        loaded: uniq(live.flatMap(loadedOn)),
        warming: uniq(live.flatMap((n) => n.warming)),
        queue_depth: live.reduce((s, n) => s + depth(n), 0),
        nodes: live.map((n) => ({ id: n.id, queue_depth: depth(n), max_queue: n.max_queue, loaded: loadedOn(n) })),
      };
    },

    async close() { dir.close(); },
  };
}
