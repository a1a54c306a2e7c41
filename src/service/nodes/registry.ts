// The registry of inference nodes, kept in the shared store (table `inference_nodes`): the one engine
// every deployment already has (LMDB for processes on one machine, PostgreSQL across machines), so
// routing needs nothing more (Redis stays optional, for rate limits). A node rewrites its record every
// heartbeat (a few small writes a second for the whole fleet); a record whose `expires_at` (three
// beats after its last) has passed is dead, which assumes the machines' clocks agree to within a beat
// or so (NTP). A node removes its record when it stops cleanly.
//   node side:  startHeartbeat(store, beat) → stop()
//   API side:   createNodeDirectory(store) → live(), refresh(), markDown(id)
import type { InferenceNodeRecord, Store } from '../../store/index.ts';

/** beats a record outlives its last one by */
export const MISSED_BEATS = 3;
/** expired records older than this are removed by the next node that starts */
const GC_AFTER_MS = 10 * 60_000;

export interface Heartbeat { stop(): Promise<void>; beatNow(): Promise<void> }

/**
 * Registers a node and keeps its record alive: `record()` gives what to write (models, queue depth),
 * this adds the heartbeat fields. The first beat is written before this resolves.
 */
export async function startHeartbeat(
  store: Store,
  opts: { intervalMs: number; record: () => Promise<Omit<InferenceNodeRecord, 'beat' | 'beat_at' | 'expires_at'>> },
  log?: { warn(o: object, m?: string): void },
): Promise<Heartbeat> {
  let beat = 0;
  let stopped = false;
  let id: string | null = null;
  let pending: Promise<void> = Promise.resolve();
  const write = async () => {
    const r = await opts.record();
    id = r.id;
    const now = Date.now();
    const expires_at = now + MISSED_BEATS * opts.intervalMs;
    const rec: InferenceNodeRecord = { ...r, beat: ++beat, beat_at: now, expires_at };
    if (stopped) return;
    await store.tx((t) => { t.inferenceNodes.put(rec); });
  };
  const beatNow = () => (pending = pending.then(write).catch((err) => {
    log?.warn({ err: String(err) }, 'inference node heartbeat failed');
  }));
  await write();
  // long-dead registrations (nodes that were killed and never came back) go
  const old = (await store.inferenceNodes.all()).filter((r) => r.expires_at < Date.now() - GC_AFTER_MS);
  if (old.length) await store.tx((t) => { for (const r of old) t.inferenceNodes.remove(r.id); });
  const timer = setInterval(beatNow, opts.intervalMs);
  timer.unref();
  return {
    beatNow,
    async stop() {
      clearInterval(timer);
      await pending;
      stopped = true;
      if (id) { const gone = id; await store.tx((t) => { t.inferenceNodes.remove(gone); }); }
    },
  };
}

export interface NodeDirectory {
  /** live nodes (not expired, not found unreachable since their last beat), from the last read */
  live(): InferenceNodeRecord[];
  /** every record of the last read, expired ones included */
  all(): InferenceNodeRecord[];
  /** reads the registry again when the last read is older than `maxAgeMs` (default the refresh period) */
  refresh(maxAgeMs?: number): Promise<void>;
  /** a node this process could not reach: left out until it beats again */
  markDown(id: string): void;
  close(): void;
}

/** The API side: the registry read every `refreshMs` (and on demand), in memory between reads. */
export async function createNodeDirectory(store: Store, opts: { refreshMs?: number } = {}): Promise<NodeDirectory> {
  const refreshMs = opts.refreshMs ?? 500;
  let records: InferenceNodeRecord[] = [];
  let readAt = 0;
  let reading: Promise<void> | null = null;
  /** node id → the beat it had when this process failed to reach it */
  const down = new Map<string, number>();
  /** one read at a time; `readAt` is when the last completed read began (what it saw is at least that new) */
  const read = (): Promise<void> => (reading ??= (() => {
    const started = Date.now();
    return store.inferenceNodes.all().then((rs) => {
      records = rs;
      readAt = started;
      for (const [id, beat] of down) if (!rs.some((r) => r.id === id && r.beat === beat)) down.delete(id);
    });
  })().finally(() => { reading = null; }));
  await read();
  const timer = setInterval(() => { read().catch(() => { /* the store is down: keep the last view */ }); }, refreshMs);
  timer.unref();
  return {
    live() {
      const now = Date.now();
      return records.filter((r) => r.expires_at > now && down.get(r.id) !== r.beat);
    },
    all: () => records,
    async refresh(maxAgeMs = refreshMs) {
      const since = Date.now() - maxAgeMs;
      if (readAt > since) return;
      // a read already in flight may have begun before what the caller just wrote: wait for it, then read anew
      if (reading) await reading.catch(() => {});
      if (readAt <= since) await read();
    },
    markDown(id) {
      const r = records.find((x) => x.id === id);
      if (r) down.set(id, r.beat);
    },
    close() { clearInterval(timer); },
  };
}
