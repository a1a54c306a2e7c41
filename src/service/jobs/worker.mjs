// Piscina worker entry of the customization pool (dataset processing, training, evaluation,
// generation). Plain JS so it loads in any worker thread; it registers the TypeScript loader that
// the main thread runs under (tsx does not install itself in worker threads on Node 20) and then
// dispatches to src/service/jobs/tasks.ts.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

let tasks = null;
async function load() {
  if (tasks) return tasks;
  if (!process.env.LOOM_WORKER_NO_TSX) {
    const require = createRequire(import.meta.url);
    const api = await import(pathToFileURL(require.resolve('tsx/package.json').replace(/package\.json$/, 'dist/esm/api/index.mjs')).href);
    api.register();
  }
  tasks = await import('./tasks.ts');
  return tasks;
}

export default async function run(task) {
  const t = await load();
  try {
    return await t.runTask(task);
  } finally {
    // the result travels on Piscina's own port, which may overtake the task's last messages on
    // `task.port`: this marker, last on that port, tells the pool that every message has arrived
    try { task.port?.postMessage({ type: END_OF_MESSAGES }); } catch { /* port already closed */ }
  }
}

const END_OF_MESSAGES = 'loom:end-of-messages';
