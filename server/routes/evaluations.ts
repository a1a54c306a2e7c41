// Evaluations and baseline models.
import type { RouteDef } from '../router.ts';

export function evaluationRoutes(): RouteDef[] {
  return [
    {
      method: 'POST', path: '/felix/evaluations', auth: 'any',
      body: {
        type: 'object', required: ['base_model', 'dataset_name'],
        properties: {
          base_model: { type: 'string', minLength: 1 }, dataset_name: { type: 'string', minLength: 1 }, project_id: { type: 'string', minLength: 1 },
          dataset_version: { type: 'string', minLength: 1 }, threshold: { type: 'number', minimum: 0, maximum: 1 },
        },
      },
      handler: ({ services, principal, body }) => services.evaluations.create(principal, body),
    },
    {
      method: 'GET', path: '/felix/evaluations', auth: 'any', query: { project_id: { type: 'string' } },
      handler: ({ services, principal, query }) => services.evaluations.list(principal, query),
    },
    {
      method: 'GET', path: '/felix/evaluations/:id', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.evaluations.get(principal, params.id),
    },
    {
      method: 'DELETE', path: '/felix/evaluations/:id', auth: 'any', params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.evaluations.remove(principal, params.id),
    },
    { method: 'GET', path: '/felix/baseline-models', auth: 'any', handler: ({ services }) => services.evaluations.baselines() },
  ];
}
