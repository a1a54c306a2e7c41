// The durable job queue on PostgreSQL (pg-boss 10), used when the store is PostgreSQL
// (LOOM_DATABASE_URL): API processes enqueue, processes with the 'worker' role consume. The store
// keeps each job's record and state as before; a queue message carries only the record's id.
//
// Why pg-boss: the queue lives in the PostgreSQL that already holds the job records (no second
// engine whose state can disagree with the store; Redis stays optional). Enqueueing happens right
// after the job's store transaction commits, not inside it: the store's transactions buffer their
// writes and may run `fn` again on a serialization failure, and the repositories never see a SQL
// connection. The job supervisor (src/service/jobs/leases.ts) is the safety net: a `requested` job
// that has waited a while without a queue message is sent again; sends are idempotent (policy 'short'
// with the job id as singletonKey: at most one waiting message per job).
//
// Liveness is the job's lease, not pg-boss: a message's expireInSeconds (23 h, pg-boss's maximum is
// 24 h) is only an upper bound; retries are the store's restart rules (retryLimit 0 here).
import PgBoss from 'pg-boss';
import type { Logger } from '../index.ts';

export type QueueKind = 'training' | 'evaluation' | 'dataset' | 'generation';
const NAMES: Record<QueueKind, string> = {
  training: 'loom-training', evaluation: 'loom-evaluation', dataset: 'loom-dataset', generation: 'loom-generation',
};
const EXPIRE_S = 23 * 3600;

export interface JobQueue {
  /**
   * enqueue job `id` (a no-op while a message for it already waits); `delayS`: not fetched before
   * that many seconds (a generation job whose team is at its cap)
   */
  send(kind: QueueKind, id: string, delayS?: number): Promise<void>;
  /**
   * consume `kind` with `concurrency` jobs at once in this process; `handler` resolves when the job
   * ended here (or was not this process's to run)
   */
  work(kind: QueueKind, concurrency: number, handler: (id: string) => Promise<void>): Promise<void>;
  /** stop fetching; waits up to `timeoutMs` for handlers in progress */
  close(timeoutMs?: number): Promise<void>;
}

export async function openJobQueue(
  opts: { url: string; log?: Logger; pollingIntervalSeconds?: number },
): Promise<JobQueue> {
  const boss = new PgBoss({
    connectionString: opts.url, schema: 'pgboss', max: 4, schedule: false, supervise: true, migrate: true,
  });
  boss.on('error', (err) => opts.log?.warn({ err: String(err) }, 'job queue (pg-boss) error'));
  await boss.start();
  for (const name of Object.values(NAMES)) {
    await boss.createQueue(name, { name, policy: 'short', retryLimit: 0, expireInSeconds: EXPIRE_S });
  }
  const polling = opts.pollingIntervalSeconds ?? 1;
  let closed = false;
  return {
    async send(kind, id, delayS) {
      if (closed) return;
      await boss.send(NAMES[kind], { id }, { singletonKey: id, ...(delayS ? { startAfter: delayS } : {}) });
    },
    async work(kind, concurrency, handler) {
      for (let i = 0; i < concurrency; i++) {
        const options = { batchSize: 1, pollingIntervalSeconds: polling };
        await boss.work<{ id: string }>(NAMES[kind], options, async (jobs) => {
          for (const j of jobs) await handler(j.data.id);
        });
      }
    },
    async close(timeoutMs = 5000) {
      if (closed) return;
      closed = true;
      await boss.stop({ graceful: true, wait: true, timeout: timeoutMs }).catch((err) => {
        opts.log?.warn({ err: String(err) }, 'job queue (pg-boss) did not stop cleanly');
      });
    },
  };
}
