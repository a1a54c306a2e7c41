// LLM-as-judge: team and project judge configurations, judging one inference now, and queueing a
// batch over the history filters (src/service/judge/).
import type { RouteDef } from '../router.ts';
import { reply } from '../router.ts';
import { JUDGE_LIMITS, MAX_BATCH } from '../../src/service/judge/index.ts';

const INTEGER_KEYS = new Set(['score_scale', 'max_retries', 'max_concurrent']);
const judgeConfigBody = {
  type: 'object',
  required: ['model', 'rubric'],
  additionalProperties: false,
  properties: {
    model: { type: 'string', minLength: 1 },
    rubric: { type: 'string', minLength: 1, maxLength: 20_000 },
    ...Object.fromEntries(
      Object.entries(JUDGE_LIMITS).map(([k, [lo, hi]]) => [
        k,
        { type: INTEGER_KEYS.has(k) ? 'integer' : 'number', minimum: lo, maximum: hi },
      ]),
    ),
  },
};

const score = { type: 'number', minimum: 0, maximum: 1 };
const batchBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: MAX_BATCH },
    model_id: { type: 'string' },
    task: { type: 'string' },
    project_id: { type: 'string' },
    training_job_id: { type: 'string' },
    latency_min: { type: 'number', minimum: 0 },
    latency_max: { type: 'number', minimum: 0 },
    llmaj_score_min: score,
    llmaj_score_max: score,
    llmaj_verdict: { enum: ['pass', 'fail', 'uncertain', 'none'] },
    since: { type: 'string', minLength: 1 },
    until: { type: 'string', minLength: 1 },
  },
};

export function judgeRoutes(): RouteDef[] {
  const team = { scope: 'team' as const };
  const project = (id: string) => ({ scope: 'project' as const, project_id: id });
  return [
    {
      method: 'GET',
      path: '/judge',
      auth: 'any',
      handler: ({ services, principal }) => services.judge.getConfig(principal, team),
    },
    {
      method: 'PUT',
      path: '/judge',
      auth: 'any',
      body: judgeConfigBody,
      handler: ({ services, principal, body }) => services.judge.putConfig(principal, team, body),
    },
    {
      method: 'DELETE',
      path: '/judge',
      auth: 'any',
      async handler({ services, principal }) {
        await services.judge.removeConfig(principal, team);
        return reply(204);
      },
    },
    {
      method: 'GET',
      path: '/projects/:project_id/judge',
      auth: 'any',
      params: { project_id: 'uuid' },
      handler: ({ services, principal, params }) => services.judge.getConfig(principal, project(params.project_id)),
    },
    {
      method: 'PUT',
      path: '/projects/:project_id/judge',
      auth: 'any',
      params: { project_id: 'uuid' },
      body: judgeConfigBody,
      handler: ({ services, principal, params, body }) =>
        services.judge.putConfig(principal, project(params.project_id), body),
    },
    {
      method: 'DELETE',
      path: '/projects/:project_id/judge',
      auth: 'any',
      params: { project_id: 'uuid' },
      async handler({ services, principal, params }) {
        await services.judge.removeConfig(principal, project(params.project_id));
        return reply(204);
      },
    },
    {
      method: 'POST',
      path: '/inferences/:id/judge',
      auth: 'any',
      params: { id: 'uuid' },
      handler: ({ services, principal, params }) => services.judge.judgeNow(principal, params.id),
    },
    {
      method: 'POST',
      path: '/inferences/judge',
      auth: 'any',
      body: batchBody,
      async handler({ services, principal, body }) {
        return reply(202, await services.judge.judgeBatch(principal, body));
      },
    },
  ];
}
