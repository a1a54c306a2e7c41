// Synthetic data generation and auto-labeling (rate limit: 120/min per user, POST /generate/*).
import type { RouteDef } from '../router.ts';
import { generateRequestSchema, labelExistingSchema } from '../../src/service/generation.ts';

export function generationRoutes(): RouteDef[] {
  return [
    {
      method: 'POST', path: '/generate', auth: 'any', body: generateRequestSchema,
      handler: ({ services, principal, body }) => services.generation.create(principal, body),
    },
    {
      method: 'GET', path: '/generate/jobs/:job_id', auth: 'any', params: { job_id: 'uuid' },
      handler: ({ services, principal, params }) => services.generation.get(principal, params.job_id),
    },
    {
      method: 'POST', path: '/generate/ner/label-existing', auth: 'any', body: labelExistingSchema(1),
      handler: ({ services, principal, body }) => services.generation.labelNer(principal, body),
    },
    {
      method: 'POST', path: '/generate/classification/label-existing', auth: 'any', body: labelExistingSchema(2),
      handler: ({ services, principal, body }) => services.generation.labelClassification(principal, body),
    },
  ];
}
