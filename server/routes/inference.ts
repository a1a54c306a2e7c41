// Native inference, the catalog, history and feedback.
import type { RouteDef } from '../router.ts';
import { feedbackRequest, inferenceRequest } from './schemas.ts';

export function inferenceRoutes(): RouteDef[] {
  return [
    {
      method: 'POST', path: '/inference', auth: 'key', body: inferenceRequest,
      handler: ({ services, principal, body, signal }) => services.inference.run(principal, body, { endpoint: '/inference', signal }),
    },
    {
      method: 'GET', path: '/base-models', auth: 'any',
      query: { supports_inference: { type: 'boolean' }, task_type: { type: 'string', enum: ['encoder', 'decoder'] } },
      async handler({ services, principal, query }) {
        const models = await services.catalog.listForTeam(principal!.team_id, query);
        return { models, count: models.length };
      },
    },
    {
      method: 'GET', path: '/inferences', auth: 'any',
      query: {
        limit: { type: 'integer', min: 1, max: 1000, default: 50 },
        offset: { type: 'integer', min: 0, default: 0 },
        model_id: { type: 'string' }, task: { type: 'string' }, project_id: { type: 'string' }, training_job_id: { type: 'string' },
        latency_min: { type: 'number', min: 0 }, latency_max: { type: 'number', min: 0 },
        llmaj_score_min: { type: 'number', min: 0, max: 1 }, llmaj_score_max: { type: 'number', min: 0, max: 1 },
        llmaj_verdict: { type: 'string', enum: ['pass', 'fail', 'uncertain', 'none'] },
        since: { type: 'datetime' }, until: { type: 'datetime' },
      },
      handler: ({ services, principal, query }) => services.history.list(principal, query),
    },
    {
      method: 'GET', path: '/inferences/:id', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.history.get(principal, params.id),
    },
    {
      method: 'POST', path: '/inferences/:id/feedback', auth: 'any', params: { id: 'uuid' }, body: feedbackRequest,
      handler: ({ services, principal, params, body }) => services.history.submitFeedback(principal, params.id, body),
    },
    {
      method: 'GET', path: '/inferences/:id/feedback', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.history.getFeedback(principal, params.id),
    },
  ];
}
