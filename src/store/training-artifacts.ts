// What a training job leaves behind besides its record: log lines (keyed by job and sequence, read
// in order) and checkpoints (listed per job in step order). Deleting a job removes both.
import { type Db, ikey, scanIndex } from './db.ts';
import type { CheckpointRecord, TrainingLogRecord } from './customization-types.ts';

export function makeTrainingArtifactsRepo(db: Db) {
  const { training_logs: logs, checkpoints, idx } = db.dbs;
  const logKey = (jobId: string, seq: number) => ikey(jobId, seq);
  const ckKey = (c: CheckpointRecord) => ikey('ck_job', c.job_id, c.step, Date.parse(c.created_at), c.id);
  const seqs = new Map<string, number>();
  function nextSeq(jobId: string): number {
    let s = seqs.get(jobId);
    if (s === undefined) {
      s = 0;
      for (const k of logs.getKeys({ start: logKey(jobId, 0), end: `${encodeURIComponent(jobId)}|\uffff`, reverse: false }) as Iterable<string>) {
        const n = Number(k.slice(k.lastIndexOf('|') + 1));
        if (n >= s) s = n + 1;
      }
    }
    seqs.set(jobId, s + 1);
    return s;
  }
  return {
    /** inside a transaction */
    appendLog(jobId: string, level: TrainingLogRecord['level'], message: string, timestamp = new Date().toISOString()): TrainingLogRecord {
      const r: TrainingLogRecord = { job_id: jobId, seq: nextSeq(jobId), timestamp, level, message };
      logs.put(logKey(jobId, r.seq), r);
      return r;
    },
    /** in order; `after` = last seq already seen */
    listLogs(jobId: string, opts: { after?: number; limit?: number } = {}): TrainingLogRecord[] {
      const out: TrainingLogRecord[] = [];
      const start = logKey(jobId, opts.after === undefined ? 0 : opts.after + 1);
      for (const { value } of logs.getRange({ start, end: `${encodeURIComponent(jobId)}|\uffff` }) as Iterable<{ value: TrainingLogRecord }>) {
        out.push(value);
        if (opts.limit && out.length >= opts.limit) break;
      }
      return out;
    },
    getCheckpoint: (id: string): CheckpointRecord | undefined => checkpoints.get(id),
    /** inside a transaction */
    putCheckpoint(c: CheckpointRecord): void { checkpoints.put(c.id, c); idx.put(ckKey(c), null); },
    /** inside a transaction */
    removeCheckpoint(c: CheckpointRecord): void { idx.remove(ckKey(c)); checkpoints.remove(c.id); },
    /** every checkpoint record (restart reconciliation) */
    allCheckpoints(): CheckpointRecord[] {
      return [...(checkpoints.getRange() as Iterable<{ value: CheckpointRecord }>)].map((e) => e.value);
    },
    /** in step order */
    listCheckpoints(jobId: string): CheckpointRecord[] {
      return [...scanIndex(db, ['ck_job', jobId], { reverse: false })].map((id) => checkpoints.get(id)).filter(Boolean);
    },
    /** inside a transaction: logs and checkpoint records of a job */
    removeJob(jobId: string): void {
      for (const c of this.listCheckpoints(jobId)) this.removeCheckpoint(c);
      for (const k of [...logs.getKeys({ start: logKey(jobId, 0), end: `${encodeURIComponent(jobId)}|\uffff` }) as Iterable<string>]) logs.remove(k);
      seqs.delete(jobId);
    },
    reindex(): void { for (const { value } of checkpoints.getRange()) idx.put(ckKey(value as CheckpointRecord), null); },
  };
}
export type TrainingArtifactsRepo = ReturnType<typeof makeTrainingArtifactsRepo>;
