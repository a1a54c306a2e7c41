// Datasets (one per team and name), their versions (listed newest first) and presigned uploads.
import { allRecords, ikey, type Kv, scanRecords } from './db.ts';
import type { DatasetRecord, DatasetVersionRecord, UploadRecord } from './customization-types.ts';

export function makeDatasetsRepo(h: Kv) {
  const dsKeys = (d: DatasetRecord): [string, string] => [ikey('ds_name', d.team_id, d.dataset_name), ikey('ds_team', d.team_id, Date.parse(d.created_at), d.id)];
  const vKey = (v: DatasetVersionRecord) => ikey('dsv', v.dataset_id, Number(v.version_number), v.id);
  const index = (d: DatasetRecord) => { const [a, b] = dsKeys(d); h.put('idx', a, d.id); h.put('idx', b, null); };
  const repo = {
    get: (id: string): Promise<DatasetRecord | undefined> => h.get('datasets', id),
    async byName(teamId: string, name: string): Promise<DatasetRecord | undefined> {
      const id = await h.get('idx', ikey('ds_name', teamId, name));
      return id ? h.get('datasets', id) : undefined;
    },
    /** inside a transaction */
    put(d: DatasetRecord): void { h.put('datasets', d.id, d); index(d); },
    listByTeam: (teamId: string): Promise<DatasetRecord[]> => scanRecords(h, 'datasets', ['ds_team', teamId]),
    getVersion: (id: string): Promise<DatasetVersionRecord | undefined> => h.get('dataset_versions', id),
    /** inside a transaction */
    putVersion(v: DatasetVersionRecord): void { h.put('dataset_versions', v.id, v); h.put('idx', vKey(v), null); },
    /** newest first */
    listVersions: (datasetId: string): Promise<DatasetVersionRecord[]> => scanRecords(h, 'dataset_versions', ['dsv', datasetId]),
    /** inside a transaction: the dataset, every version and their uploads */
    async remove(id: string): Promise<void> {
      const d = (await h.get('datasets', id)) as DatasetRecord | undefined;
      if (!d) return;
      for (const v of await repo.listVersions(id)) { h.remove('idx', vKey(v)); h.remove('dataset_versions', v.id); }
      for (const { key, value } of await h.range('uploads')) {
        const u = value as UploadRecord;
        if (u.team_id === d.team_id && u.dataset_name === d.dataset_name) h.remove('uploads', key);
      }
      for (const k of dsKeys(d)) h.remove('idx', k);
      h.remove('datasets', id);
    },
    getUpload: (id: string): Promise<UploadRecord | undefined> => h.get('uploads', id),
    /** inside a transaction */
    putUpload(u: UploadRecord): void { h.put('uploads', u.id, u); },
    /** every presigned upload (restart recovery) */
    allUploads: (): Promise<UploadRecord[]> => allRecords(h, 'uploads'),
    /** every version (restart recovery) */
    allVersions: (): Promise<DatasetVersionRecord[]> => allRecords(h, 'dataset_versions'),
    async reindex(): Promise<void> {
      for (const d of await allRecords<DatasetRecord>(h, 'datasets')) index(d);
      for (const v of await allRecords<DatasetVersionRecord>(h, 'dataset_versions')) h.put('idx', vKey(v), null);
    },
  };
  return repo;
}
export type DatasetsRepo = ReturnType<typeof makeDatasetsRepo>;
