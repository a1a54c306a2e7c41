// Projects, deployments and project inference.
import type { RouteDef } from '../router.ts';
import { reply } from '../router.ts';
import { adaptivePolicySchema } from '../../src/service/adaptive/policy.ts';
import { projectInferenceRequest } from './schemas.ts';

export function projectRoutes(): RouteDef[] {
  return [
    { method: 'GET', path: '/projects', auth: 'any', handler: ({ services, principal }) => services.projects.list(principal) },
    {
      method: 'POST', path: '/projects', auth: 'any',
      body: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 200 } } },
      handler: ({ services, principal, body }) => services.projects.create(principal, body.name),
    },
    {
      method: 'GET', path: '/projects/:project_id', auth: 'any', params: { project_id: 'uuid' },
      handler: ({ services, principal, params }) => services.projects.get(principal, params.project_id),
    },
    {
      // the adaptive policy (README "Adaptive inference"); out-of-range values are a 422 naming the path
      method: 'PATCH', path: '/projects/:project_id', auth: 'any', params: { project_id: 'uuid' },
      body: {
        type: 'object', required: ['adaptive'], additionalProperties: false, properties: { adaptive: adaptivePolicySchema },
      },
      handler: ({ services, principal, params, body }) =>
        services.adaptive.setPolicy(principal, params.project_id, body.adaptive),
    },
    {
      method: 'GET', path: '/projects/:project_id/adaptive', auth: 'any', params: { project_id: 'uuid' },
      handler: ({ services, principal, params }) => services.adaptive.status(principal, params.project_id),
    },
    {
      method: 'POST', path: '/projects/:project_id/retrain', auth: 'any', params: { project_id: 'uuid' },
      handler: ({ services, principal, params }) => services.adaptive.retrain(principal, params.project_id),
    },
    {
      method: 'DELETE', path: '/projects/:project_id', auth: 'any', params: { project_id: 'uuid' },
      async handler({ services, principal, params }) { await services.projects.remove(principal, params.project_id); return reply(204); },
    },
    {
      method: 'POST', path: '/projects/:project_id/deployments', auth: 'any', params: { project_id: 'uuid' },
      body: { type: 'object', required: ['training_job_id'], properties: { training_job_id: { type: 'string', minLength: 1 } } },
      handler: ({ services, principal, params, body }) => services.projects.deploy(principal, params.project_id, body.training_job_id),
    },
    {
      method: 'GET', path: '/projects/:project_id/deployments', auth: 'any', params: { project_id: 'uuid' },
      handler: ({ services, principal, params }) => services.projects.listDeployments(principal, params.project_id),
    },
    {
      method: 'POST', path: '/projects/:project_id/inference', auth: 'key', params: { project_id: 'uuid' }, body: projectInferenceRequest,
      handler: ({ services, principal, params, body, signal }) => services.projects.infer(principal, params.project_id, body, { signal }),
    },
  ];
}
