// Helpers of the customization tests: the three-step dataset upload through HTTP and polling.
import { call, type Res } from './helpers.ts';

export async function poll(fn: () => Promise<Res>, done: (r: Res) => boolean, timeoutMs = 60_000, everyMs = 50): Promise<Res> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const r = await fn();
    if (done(r) || Date.now() > until) return r;
    await new Promise((res) => setTimeout(res, everyMs));
  }
}

/** polls a training job until it is complete, failed or cancelled; returns the job's last GET */
export function trainingJobEnded(url: string, key: string, id: string, timeoutMs = 120_000): Promise<Res> {
  const ended = ['complete', 'failed', 'cancelled'];
  const job = () => call(url, 'GET', `/felix/training-jobs/${id}`, { key });
  return poll(job, (r) => ended.includes(r.body.status), timeoutMs, 200);
}

/** polls a project's adaptive state until run `runId` has left preparing/training/evaluating; returns the run */
export async function adaptiveRunDone(url: string, key: string, projectId: string, runId: string, timeoutMs = 90_000) {
  const busy = ['preparing', 'training', 'evaluating'];
  const runOf = (r: Res) => r.body.runs.find((x: { id: string }) => x.id === runId);
  const state = () => call(url, 'GET', `/projects/${projectId}/adaptive`, { key });
  const r = await poll(state, (r) => !busy.includes(runOf(r)?.status), timeoutMs, 250);
  return runOf(r);
}

/** url → PUT → process → poll until ready|failed; returns the final version body */
export async function uploadDataset(url: string, key: string, name: string, type: string, filename: string, content: string | Buffer): Promise<Res> {
  const u = await call(url, 'POST', '/felix/datasets/upload/url', { key, body: { dataset_name: name, dataset_type: type, filename } });
  if (u.status !== 200) return u;
  const put = await fetch(u.body.upload_url, { method: 'PUT', body: typeof content === 'string' ? content : new Uint8Array(content) });
  if (put.status !== 200) throw new Error(`PUT failed: ${put.status} ${await put.text()}`);
  const pr = await call(url, 'POST', '/felix/datasets/upload/process', { key, body: { dataset_name: name, upload_id: u.body.upload_id } });
  if (pr.status !== 200) return pr;
  return poll(() => call(url, 'GET', `/felix/datasets/${name}/${u.body.version_number}`, { key }), (r) => r.body?.status === 'ready' || r.body?.status === 'failed');
}

export const nerLine = (text: string, ents: Array<[string, string]>) => {
  const entities = [];
  let from = 0;
  for (const [t, label] of ents) {
    const start = text.indexOf(t, from);
    if (start < 0) throw new Error(`${t} not in ${text}`);
    entities.push({ start, end: start + t.length, label, text: t });
    from = start + t.length;
  }
  return JSON.stringify({ text, entities });
};
