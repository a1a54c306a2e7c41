// Store reads cached for the rest of an event-loop turn. A request handled in uWS's poll callback may
// reuse what an earlier request of the same turn read (the auth generation) instead of reading it
// again, and still never answers differently from a fresh read: lmdb's own read snapshot lasts at
// least as long. lmdb renews it after each commit of this process and at the next timers phase (a
// setTimeout(0)), when other processes' commits become visible; a cached value is dropped after
// each commit of this process (src/store/db.ts onCommit) and in the check phase of the same turn
// (setImmediate), before lmdb's renewal. So "revoked on its very next request" holds as before.
import { onCommit, type Store } from '../store/index.ts';

/** changes after every commit of a watched store and at the end of every turn in which it was read */
let epoch = 0;
let scheduled = false;
const advance = (): void => { epoch++; scheduled = false; };
const watched = new WeakSet<Store>();

/** the current turn's epoch; schedules its end (one setImmediate per turn, for every cache) */
function currentEpoch(): number {
  if (!scheduled) { scheduled = true; setImmediate(advance); }
  return epoch;
}

function watch(store: Store): void {
  if (watched.has(store)) return;
  watched.add(store);
  onCommit(store.db, () => { epoch++; });
}

/** `read()`'s value, read again after a commit of this process or in a later event-loop turn */
export function turnCached<T>(store: Store, read: () => T): () => T {
  watch(store);
  let at = -1;
  let value: T;
  return () => {
    const e = currentEpoch();
    if (at !== e) { value = read(); at = e; }
    return value;
  };
}
