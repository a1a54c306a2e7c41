// Training jobs, their logs/checkpoints/weights, trained models.
import type { RouteDef } from '../router.ts';
import { sendFile } from './files.ts';
import { SSE_HEADERS } from '../http.ts';
import { requestBaseUrl } from '../../src/service/signed-urls.ts';
import { trainingJobRequestSchema } from '../../src/service/training/request.ts';

export function trainingJobRoutes(): RouteDef[] {
  return [
    {
      method: 'POST', path: '/felix/training-jobs', auth: 'any', body: trainingJobRequestSchema,
      handler: ({ services, principal, body }) => services.trainingJobs.create(principal, body),
    },
    {
      method: 'GET', path: '/felix/training-jobs', auth: 'any',
      query: {
        status: { type: 'string', enum: ['requested', 'running', 'complete', 'deployed', 'failed', 'cancelled'] },
        project_id: { type: 'string' },
        limit: { type: 'integer', min: 1, max: 200, default: 200 },
        offset: { type: 'integer', min: 0, default: 0 },
      },
      handler: ({ services, principal, query }) => services.trainingJobs.list(principal, query),
    },
    {
      method: 'GET', path: '/felix/training-jobs/:id', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.trainingJobs.get(principal, params.id),
    },
    {
      // JSON, or with ?stream=true server-sent events: one `log` event per entry as it is written,
      // then an `end` event with the final status once the job is finished
      method: 'GET', path: '/felix/training-jobs/:id/logs', auth: 'any', params: { id: 'uuid' },
      query: { after: { type: 'integer', min: -1 }, limit: { type: 'integer', min: 1, max: 10_000, default: 1000 }, stream: { type: 'boolean', default: false } },
      async handler({ services, principal, params, query, stream, signal }) {
        if (!query.stream) return services.trainingJobs.logs(principal, params.id, query);
        let after: number | undefined = query.after;
        await services.trainingJobs.get(principal, params.id); // 404 before the stream starts
        const s = stream(200, SSE_HEADERS);
        while (!signal.aborted) {
          const batch = (await services.trainingJobs.logs(principal, params.id, { after, limit: 1000 })).logs;
          for (const l of batch) { await s.sse(l, 'log'); after = l.seq; }
          if (batch.length) continue;
          let status: string;
          try { status = (await services.trainingJobs.get(principal, params.id)).status; } catch { status = 'deleted'; }
          if (!['requested', 'running'].includes(status)) { await s.sse({ status }, 'end'); break; }
          await new Promise((r) => setTimeout(r, 500));
        }
        s.end();
      },
    },
    {
      method: 'GET', path: '/felix/training-jobs/:id/checkpoints', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.trainingJobs.checkpoints(principal, params.id),
    },
    {
      method: 'GET', path: '/felix/training-jobs/:id/download', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params, headers }) => services.trainingJobs.download(principal, params.id, requestBaseUrl(headers, services.config.publicUrl, services.config.trustProxy)),
    },
    {
      // the signed URL returned by /download: the signature is the credential
      method: 'GET', path: '/felix/training-jobs/:id/download/archive', auth: 'none', params: { id: 'uuid' },
      query: { expires: { type: 'integer' }, signature: { type: 'string' } },
      async handler({ services, params, query, url, stream }) {
        services.signedUrls.verify('GET', url, query);
        const a = await services.trainingJobs.archive(params.id);
        await sendFile(stream, a.path, { 'Content-Type': 'application/gzip', 'Content-Disposition': `attachment; filename="${a.filename.replace(/"/g, '')}"` });
      },
    },
    {
      method: 'POST', path: '/felix/training-jobs/:id/stop', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.trainingJobs.stop(principal, params.id),
    },
    {
      method: 'DELETE', path: '/felix/training-jobs/:id', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.trainingJobs.remove(principal, params.id),
    },
    { method: 'GET', path: '/felix/trained-models', auth: 'any', handler: ({ services, principal }) => services.trainingJobs.trainedModels(principal) },
  ];
}
