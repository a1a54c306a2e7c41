// POST /gliner-2/* — extraction endpoints over the encoder, with the same schema forms and the same
// result format as POST /inference (encoder form). Each is a shortcut that builds the `schema`
// from its own field; `model_id` defaults to the router `service/auto` (which picks the encoder).
//   /gliner-2/extract            body exactly as POST /inference (encoder form)
//   /gliner-2/extract-entities   `entities` (or `labels`): label list / [{name, description}] / {label: description}
//   /gliner-2/classify-text      `classifications`: [{task, labels, multi_label?}]  (or top-level `task` + `labels`)
//   /gliner-2/extract-json       `structures`: {name: {field: spec}}
//   /gliner-2/extract-relations  `relations` (+ optional `entities`)
import { ValidationError } from '../../src/service/errors.ts';
import { ROUTER_MODEL_ID } from '../../src/service/router.ts';
import type { Principal } from '../../src/service/auth.ts';
import type { Ctx, RouteDef } from '../router.ts';
import { encoderSchemaSchema } from './schemas.ts';

const labelList = { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1 };
const entitiesSchema = {
  anyOf: [
    labelList,
    { type: 'array', minItems: 1, items: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1 }, description: { type: 'string' } } } },
    { type: 'object', minProperties: 1, additionalProperties: { type: 'string' } },
  ],
};
const classificationsSchema = {
  type: 'array', minItems: 1,
  items: { type: 'object', required: ['task', 'labels'], properties: { task: { type: 'string', minLength: 1 }, labels: { type: 'array', items: { type: 'string' }, minItems: 2 }, multi_label: { type: 'boolean' }, cls_threshold: { type: 'number', minimum: 0, maximum: 1 } } },
};

const common = {
  model_id: { type: 'string', minLength: 1 },
  text: { anyOf: [{ type: 'string', minLength: 1 }, { type: 'array', minItems: 1, maxItems: 10_000, items: { type: 'string', minLength: 1 } }] },
  threshold: { type: 'number', minimum: 0, maximum: 1 },
  include_confidence: { type: 'boolean' },
  include_spans: { type: 'boolean' },
  store: { type: 'boolean' },
  project_id: { type: 'string', minLength: 1 },
};

type Body = Record<string, any>;

function run(ctx: Ctx, path: string, schema: unknown, task?: string) {
  const b = ctx.body as Body;
  return ctx.services.inference.runEncoder(ctx.principal as Principal, {
    model_id: b.model_id ?? ROUTER_MODEL_ID,
    text: b.text,
    schema,
    threshold: b.threshold,
    include_confidence: b.include_confidence,
    include_spans: b.include_spans,
    store: b.store,
    project_id: b.project_id,
    task,
  }, { endpoint: path, signal: ctx.signal });
}

export function gliner2Routes(): RouteDef[] {
  return [
    {
      method: 'POST', path: '/gliner-2/extract', auth: 'key',
      body: { type: 'object', required: ['text', 'schema'], properties: { ...common, schema: encoderSchemaSchema, task: { type: 'string' } } },
      handler: (ctx) => run(ctx, '/gliner-2/extract', (ctx.body as Body).schema, (ctx.body as Body).task),
    },
    {
      method: 'POST', path: '/gliner-2/extract-entities', auth: 'key',
      body: { type: 'object', required: ['text'], properties: { ...common, entities: entitiesSchema, labels: entitiesSchema } },
      handler(ctx) {
        const b = ctx.body as Body;
        const entities = b.entities ?? b.labels;
        if (entities === undefined) throw new ValidationError("Missing 'entities' (or 'labels')", [{ path: '/entities', message: 'is required', keyword: 'required' }]);
        return run(ctx, '/gliner-2/extract-entities', { entities }, 'ner');
      },
    },
    {
      method: 'POST', path: '/gliner-2/classify-text', auth: 'key',
      body: { type: 'object', required: ['text'], properties: { ...common, classifications: classificationsSchema, task: { type: 'string', minLength: 1 }, labels: { type: 'array', items: { type: 'string' }, minItems: 2 }, multi_label: { type: 'boolean' } } },
      handler(ctx) {
        const b = ctx.body as Body;
        const classifications = b.classifications ?? (b.labels ? [{ task: b.task ?? 'label', labels: b.labels, ...(b.multi_label !== undefined ? { multi_label: b.multi_label } : {}) }] : undefined);
        if (!classifications) throw new ValidationError("Missing 'classifications' (or 'labels')", [{ path: '/classifications', message: 'is required', keyword: 'required' }]);
        return run(ctx, '/gliner-2/classify-text', { classifications }, 'classification');
      },
    },
    {
      method: 'POST', path: '/gliner-2/extract-json', auth: 'key',
      body: { type: 'object', required: ['text', 'structures'], properties: { ...common, structures: { type: 'object', minProperties: 1 } } },
      handler: (ctx) => run(ctx, '/gliner-2/extract-json', { structures: (ctx.body as Body).structures }, 'structure'),
    },
    {
      method: 'POST', path: '/gliner-2/extract-relations', auth: 'key',
      body: { type: 'object', required: ['text', 'relations'], properties: { ...common, relations: { type: 'array', minItems: 1, items: { anyOf: [{ type: 'string', minLength: 1 }, { type: 'object' }] } }, entities: entitiesSchema } },
      handler(ctx) {
        const b = ctx.body as Body;
        return run(ctx, '/gliner-2/extract-relations', { relations: b.relations, ...(b.entities ? { entities: b.entities } : {}) }, 'relations');
      },
    },
  ];
}
