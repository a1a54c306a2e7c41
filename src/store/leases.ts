// Leases: which process runs an in-flight job right now (src/service/jobs/leases.ts owns their life
// cycle). One record per job, keyed `<kind>|<id>`; the owner renews `expires_at` every few seconds
// and removes the record when the job ends or the process shuts down cleanly.
import { ikey, KEY_END, type Kv } from './db.ts';

export type LeaseKind = 'training' | 'evaluation' | 'generation' | 'dataset';

export interface LeaseRecord {
  kind: LeaseKind;
  /** the job's id (a dataset version's id for 'dataset') */
  id: string;
  /** the owning process: unique per start (host, pid and a random part) */
  owner: string;
  host: string;
  /** the owner's PID namespace (/proc/self/ns/pid): a PID is only comparable within one */
  pidns: string;
  pid: number;
  /** ms since the epoch */
  expires_at: number;
}

export function makeLeasesRepo(h: Kv) {
  const key = (kind: LeaseKind, id: string) => ikey(kind, id);
  return {
    get: (kind: LeaseKind, id: string): Promise<LeaseRecord | undefined> => h.get('leases', key(kind, id)),
    /** inside a transaction */
    put(l: LeaseRecord): void { h.put('leases', key(l.kind, l.id), l); },
    /** inside a transaction */
    remove(kind: LeaseKind, id: string): void { h.remove('leases', key(kind, id)); },
    async listByKind(kind: LeaseKind): Promise<LeaseRecord[]> {
      const p = `${ikey(kind)}|`;
      return (await h.range('leases', { gte: p, lt: p + KEY_END })).map((e) => e.value as LeaseRecord);
    },
  };
}
export type LeasesRepo = ReturnType<typeof makeLeasesRepo>;
