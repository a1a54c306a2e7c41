// What a training job leaves behind besides its record: log lines (keyed by job and sequence, read
// in order) and checkpoints (listed per job in step order). Deleting a job removes both.
import { allRecords, ikey, KEY_END, type Kv, scanRecords } from './db.ts';
import type { CheckpointRecord, TrainingLogRecord } from './customization-types.ts';

export function makeTrainingArtifactsRepo(h: Kv) {
  const logKey = (jobId: string, seq: number) => ikey(jobId, seq);
  const logsOf = (jobId: string, from = 0) => ({ gte: logKey(jobId, from), lt: `${encodeURIComponent(jobId)}|${KEY_END}` });
  const ckKey = (c: CheckpointRecord) => ikey('ck_job', c.job_id, c.step, Date.parse(c.created_at), c.id);
  const repo = {
    /** inside a transaction: the next line's sequence number follows the last stored one */
    async appendLog(
      jobId: string, level: TrainingLogRecord['level'], message: string, timestamp = new Date().toISOString(),
    ): Promise<TrainingLogRecord> {
      const [last] = await h.range('training_logs', { ...logsOf(jobId), reverse: true, limit: 1 });
      const seq = last ? (last.value as TrainingLogRecord).seq + 1 : 0;
      const r: TrainingLogRecord = { job_id: jobId, seq, timestamp, level, message };
      h.put('training_logs', logKey(jobId, seq), r);
      return r;
    },
    /** in order; `after` = last seq already seen */
    async listLogs(jobId: string, opts: { after?: number; limit?: number } = {}): Promise<TrainingLogRecord[]> {
      const r = await h.range('training_logs', { ...logsOf(jobId, opts.after === undefined ? 0 : opts.after + 1), limit: opts.limit || undefined });
      return r.map((e) => e.value as TrainingLogRecord);
    },
    getCheckpoint: (id: string): Promise<CheckpointRecord | undefined> => h.get('checkpoints', id),
    /** inside a transaction */
    putCheckpoint(c: CheckpointRecord): void { h.put('checkpoints', c.id, c); h.put('idx', ckKey(c), null); },
    /** inside a transaction */
    removeCheckpoint(c: CheckpointRecord): void { h.remove('idx', ckKey(c)); h.remove('checkpoints', c.id); },
    /** every checkpoint record (restart reconciliation) */
    allCheckpoints: (): Promise<CheckpointRecord[]> => allRecords(h, 'checkpoints'),
    /** in step order */
    listCheckpoints: (jobId: string): Promise<CheckpointRecord[]> => scanRecords(h, 'checkpoints', ['ck_job', jobId], { reverse: false }),
    /** inside a transaction: logs and checkpoint records of a job */
    async removeJob(jobId: string): Promise<void> {
      for (const c of await repo.listCheckpoints(jobId)) repo.removeCheckpoint(c);
      for (const { key } of await h.range('training_logs', logsOf(jobId))) h.remove('training_logs', key);
    },
    async reindex(): Promise<void> {
      for (const c of await allRecords<CheckpointRecord>(h, 'checkpoints')) h.put('idx', ckKey(c), null);
    },
  };
  return repo;
}
export type TrainingArtifactsRepo = ReturnType<typeof makeTrainingArtifactsRepo>;
