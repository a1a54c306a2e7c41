// Store reads kept for a millisecond. An authenticated request reads the auth generation
// (src/store/db.ts); under load, requests of the same millisecond share one read instead of each
// renewing lmdb's read transaction (and scheduling its reset timer) for one small value: at about
// 3k requests a second on the loaded 2-core EPYC, 10 us of server CPU per request (README, "HTTP
// pipeline"). lmdb-js keeps its own read snapshot until a setTimeout(0) fires (at least 1 ms in
// Node) or this process commits, so a plain read may already miss another process's commit (`loom
// admin` revoking a key) for about a millisecond; a kept value for about one more. A value is
// dropped after every commit of this process (lmdb's aftercommit, onCommit in src/store/db.ts), so
// this process's own writes (a key revoked through the API) are seen by the very next request.
import { performance } from 'node:perf_hooks';
import { onCommit, type Store } from '../store/index.ts';

/** how long a read is kept: as long as lmdb-js keeps a read snapshot at least (its reset is a setTimeout(0)) */
export const READ_KEPT_MS = 1;

/** `read()`'s value, read again after a commit of this process or once it is READ_KEPT_MS old (by `clock`, ms) */
export function cachedRead<T>(store: Store, read: () => T, clock: () => number = () => performance.now()): () => T {
  let at = -Infinity;
  let value: T;
  onCommit(store.db, () => { at = -Infinity; });
  return () => {
    const now = clock();
    if (now - at >= READ_KEPT_MS) { value = read(); at = now; }
    return value;
  };
}
