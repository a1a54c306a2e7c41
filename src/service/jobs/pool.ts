// The customization worker pool (Piscina): dataset processing, training and evaluation run in
// worker threads so the event loop stays free. Tasks report progress over a MessagePort; a
// training task is stopped gracefully by a `stop` message on its port (the trainer sees an aborted
// signal, saves its last checkpoint and returns).
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { Task } from './tasks.ts';

/** a task as submitted (the pool adds the port) */
export type TaskInput = Task extends infer T ? (T extends unknown ? Omit<T, 'port'> : never) : never;

export interface JobPool {
  /** run a task; `onMessage` receives what the task posts on its port */
  run<T>(task: TaskInput, onMessage?: (m: any) => void): { result: Promise<T>; port: MessagePort };
  readonly threads: number;
  close(): Promise<void>;
}

/** the worker's last message on a task's port (src/service/jobs/worker.mjs) */
const END_OF_MESSAGES = 'loom:end-of-messages';

export function createJobPool(opts: { threads: number }): JobPool {
  const pool = new Piscina({
    filename: new URL('./worker.mjs', import.meta.url).href,
    minThreads: 0,
    maxThreads: Math.max(1, opts.threads),
    idleTimeout: 20_000,
    // one task per thread: a training task owns its thread for its whole run
    concurrentTasksPerWorker: 1,
  });
  return {
    threads: Math.max(1, opts.threads),
    run<T>(task: TaskInput, onMessage?: (m: any) => void) {
      const { port1, port2 } = new MessageChannel();
      // messages on one port arrive in order, but the result comes on Piscina's port and may overtake
      // them: the result is handed on only once the worker's end marker (its last message) arrived
      let ended!: () => void;
      const allArrived = new Promise<void>((r) => { ended = r; });
      port1.on('message', (m) => {
        if (m?.type === END_OF_MESSAGES) ended();
        else onMessage?.(m);
      });
      const settle = (ms: number) => Promise.race([allArrived, new Promise<void>((r) => setTimeout(r, ms).unref())])
        .then(() => port1.close());
      const result = (pool.run({ ...task, port: port2 }, { transferList: [port2] }) as Promise<T>).then(
        async (v) => { await settle(10_000); return v; },
        // a worker that died sends no marker; one whose task threw does
        async (e) => { await settle(500); throw e; },
      );
      return { result, port: port1 };
    },
    async close() { await pool.destroy(); },
  };
}
