// Datasets (one per team and name), their versions (listed newest first) and presigned uploads.
import { type Db, ikey, scanIndex } from './db.ts';
import type { DatasetRecord, DatasetVersionRecord, UploadRecord } from './customization-types.ts';

export function makeDatasetsRepo(db: Db) {
  const { datasets, dataset_versions: versions, uploads, idx } = db.dbs;
  const dsKeys = (d: DatasetRecord): [string, string] => [ikey('ds_name', d.team_id, d.dataset_name), ikey('ds_team', d.team_id, Date.parse(d.created_at), d.id)];
  const vKey = (v: DatasetVersionRecord) => ikey('dsv', v.dataset_id, Number(v.version_number), v.id);
  return {
    get: (id: string): DatasetRecord | undefined => datasets.get(id),
    byName(teamId: string, name: string): DatasetRecord | undefined {
      const id = idx.get(ikey('ds_name', teamId, name));
      return id ? datasets.get(id) : undefined;
    },
    /** inside a transaction */
    put(d: DatasetRecord): void {
      datasets.put(d.id, d);
      const [a, b] = dsKeys(d);
      idx.put(a, d.id); idx.put(b, null);
    },
    listByTeam(teamId: string): DatasetRecord[] {
      return [...scanIndex(db, ['ds_team', teamId])].map((id) => datasets.get(id)).filter(Boolean);
    },
    getVersion: (id: string): DatasetVersionRecord | undefined => versions.get(id),
    /** inside a transaction */
    putVersion(v: DatasetVersionRecord): void { versions.put(v.id, v); idx.put(vKey(v), null); },
    /** newest first */
    listVersions(datasetId: string): DatasetVersionRecord[] {
      return [...scanIndex(db, ['dsv', datasetId])].map((id) => versions.get(id)).filter(Boolean);
    },
    /** inside a transaction: the dataset, every version and their uploads */
    remove(id: string): void {
      const d = datasets.get(id) as DatasetRecord | undefined;
      if (!d) return;
      for (const v of this.listVersions(id)) { idx.remove(vKey(v)); versions.remove(v.id); }
      for (const { key, value } of uploads.getRange() as Iterable<{ key: string; value: UploadRecord }>) {
        if (value.team_id === d.team_id && value.dataset_name === d.dataset_name) uploads.remove(key);
      }
      for (const k of dsKeys(d)) idx.remove(k);
      datasets.remove(id);
    },
    getUpload: (id: string): UploadRecord | undefined => uploads.get(id),
    /** inside a transaction */
    putUpload(u: UploadRecord): void { uploads.put(u.id, u); },
    /** every presigned upload (restart recovery) */
    allUploads(): UploadRecord[] {
      return [...(uploads.getRange() as Iterable<{ value: UploadRecord }>)].map((e) => e.value);
    },
    /** every version (restart recovery) */
    allVersions(): DatasetVersionRecord[] {
      return [...(versions.getRange() as Iterable<{ value: DatasetVersionRecord }>)].map((e) => e.value);
    },
    reindex(): void {
      for (const { value } of datasets.getRange()) { const [a, b] = dsKeys(value as DatasetRecord); idx.put(a, (value as DatasetRecord).id); idx.put(b, null); }
      for (const { value } of versions.getRange()) idx.put(vKey(value as DatasetVersionRecord), null);
    },
  };
}
export type DatasetsRepo = ReturnType<typeof makeDatasetsRepo>;
