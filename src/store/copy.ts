// Copying one store into another (`loom admin migrate-store --to postgres://...`): every record of
// every table (indexes and `meta` included) read in key order and written in transactions of CHUNK
// records. The target must be empty (a second run is refused, never merged into what the first
// wrote); the source should not change meanwhile (stop the servers first: the copy is not one snapshot).
import { type Db, DB_NAMES, type DbName } from './db.ts';

/** records per target transaction */
const CHUNK = 500;

/** the first table of `db` that holds a record (meta: anything but schema_version), or null */
export async function firstNonEmpty(db: Db): Promise<DbName | null> {
  for (const t of DB_NAMES) {
    const rows = await db.read.range(t, { limit: 2 });
    if (rows.some((r) => !(t === 'meta' && r.key === 'schema_version'))) return t;
  }
  return null;
}

/** copies every record of `from` into the empty `to`; the records copied per table */
export async function copyStore(
  from: Db, to: Db, progress?: (table: DbName, copied: number) => void,
): Promise<Record<string, number>> {
  const busy = await firstNonEmpty(to);
  if (busy) throw new Error(`the target store is not empty (table ${busy} has records): nothing copied`);
  const counts: Record<string, number> = {};
  for (const t of DB_NAMES) {
    let n = 0;
    let after: string | undefined;
    for (;;) {
      const rows = (await from.read.range(t, { gte: after, limit: CHUNK + 1 })).filter((r) => r.key !== after);
      const chunk = rows.slice(0, CHUNK);
      if (chunk.length === 0) break;
      await to.tx((h) => { for (const r of chunk) h.put(t, r.key, r.value); });
      n += chunk.length;
      after = chunk[chunk.length - 1].key;
      progress?.(t, n);
      if (chunk.length < CHUNK) break;
    }
    counts[t] = n;
  }
  return counts;
}
