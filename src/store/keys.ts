// API keys: stored by id, looked up by the sha256 of the secret (the secret is never stored),
// listed per team in creation order.
import { allRecords, bumpAuthGeneration, ikey, type Kv, scanRecords } from './db.ts';
import type { ApiKeyRecord } from './types.ts';

export function makeKeysRepo(h: Kv) {
  const indexKey = (k: ApiKeyRecord) => {
    h.put('idx', ikey('key_hash', k.hash), k.id);
    h.put('idx', ikey('key_team', k.team_id, Date.parse(k.created_at), k.id), null);
  };
  return {
    get: (id: string): Promise<ApiKeyRecord | undefined> => h.get('keys', id),
    async byHash(hash: string): Promise<ApiKeyRecord | undefined> {
      const id = await h.get('idx', ikey('key_hash', hash));
      return id ? h.get('keys', id) : undefined;
    },
    /** inside a transaction */
    put(k: ApiKeyRecord): void {
      h.put('keys', k.id, k);
      indexKey(k);
      bumpAuthGeneration(h);
    },
    listByTeam: (teamId: string): Promise<ApiKeyRecord[]> => scanRecords(h, 'keys', ['key_team', teamId], { reverse: false }),
    /** atomic read-modify-write of the usage counters (inside a transaction) */
    async bump(id: string, d: { requests?: number; tokens?: number; cost_micro?: number; at?: string }): Promise<void> {
      const k = (await h.get('keys', id)) as ApiKeyRecord | undefined;
      if (!k) return;
      h.put('keys', id, {
        ...k,
        request_count: k.request_count + (d.requests ?? 0),
        usage_tokens: k.usage_tokens + (d.tokens ?? 0),
        usage_cost_micro: k.usage_cost_micro + (d.cost_micro ?? 0),
        last_used_at: d.at ?? k.last_used_at,
      });
    },
    async reindex(): Promise<void> {
      for (const k of await allRecords<ApiKeyRecord>(h, 'keys')) indexKey(k);
    },
  };
}
export type KeysRepo = ReturnType<typeof makeKeysRepo>;
