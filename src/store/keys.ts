// API keys: stored by id, looked up by the sha256 of the secret (the secret is never stored),
// listed per team in creation order.
import { bumpAuthGeneration, type Db, ikey, scanIndex } from './db.ts';
import type { ApiKeyRecord } from './types.ts';

export function makeKeysRepo(db: Db) {
  const { keys, idx } = db.dbs;
  const indexKey = (k: ApiKeyRecord) => {
    idx.put(ikey('key_hash', k.hash), k.id);
    idx.put(ikey('key_team', k.team_id, Date.parse(k.created_at), k.id), null);
  };
  return {
    get: (id: string): ApiKeyRecord | undefined => keys.get(id),
    byHash(hash: string): ApiKeyRecord | undefined {
      const id = idx.get(ikey('key_hash', hash));
      return id ? keys.get(id) : undefined;
    },
    /** inside a transaction */
    put(k: ApiKeyRecord): void {
      keys.put(k.id, k);
      indexKey(k);
      bumpAuthGeneration(db);
    },
    listByTeam(teamId: string): ApiKeyRecord[] {
      return [...scanIndex(db, ['key_team', teamId], { reverse: false })].map((id) => keys.get(id)).filter(Boolean);
    },
    /** atomic read-modify-write of the usage counters (inside a transaction) */
    bump(id: string, d: { requests?: number; tokens?: number; cost_micro?: number; at?: string }): void {
      const k = keys.get(id) as ApiKeyRecord | undefined;
      if (!k) return;
      keys.put(id, {
        ...k,
        request_count: k.request_count + (d.requests ?? 0),
        usage_tokens: k.usage_tokens + (d.tokens ?? 0),
        usage_cost_micro: k.usage_cost_micro + (d.cost_micro ?? 0),
        last_used_at: d.at ?? k.last_used_at,
      });
    },
    reindex(): void {
      for (const { value } of keys.getRange()) indexKey(value as ApiKeyRecord);
    },
  };
}
export type KeysRepo = ReturnType<typeof makeKeysRepo>;
