// Model weights on this server: GET /models/state?model_id= (ready, warming with progress, pullable),
// POST /models/pull {model_id} (start pulling ahead of the first call). The dashboard's Models page.
import type { RouteDef } from '../router.ts';

export function modelRoutes(): RouteDef[] {
  return [
    {
      method: 'GET',
      path: '/models/state',
      auth: 'any',
      query: { model_id: { type: 'string' } },
      handler: ({ services, query }) => services.catalog.state(query.model_id ?? ''),
    },
    {
      method: 'POST',
      path: '/models/pull',
      auth: 'any',
      body: {
        type: 'object',
        required: ['model_id'],
        properties: { model_id: { type: 'string', minLength: 1, maxLength: 300 } },
      },
      handler: ({ services, body, log }) => services.catalog.pull(body.model_id, log),
    },
  ];
}
