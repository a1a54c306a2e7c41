// ajv schemas of the native endpoints' bodies (shared with the worker pool for large bodies).
const cacheControl = { type: 'object', required: ['type'], properties: { type: { const: 'ephemeral' }, ttl: { type: 'string' } } };
const textBlock = { type: 'object', required: ['type', 'text'], properties: { type: { const: 'text' }, text: { type: 'string' }, cache_control: cacheControl } };
export const messageSchema = {
  type: 'object', required: ['role', 'content'],
  properties: {
    role: { enum: ['system', 'developer', 'user', 'assistant', 'tool'] },
    content: { anyOf: [{ type: 'string' }, { type: 'array', items: textBlock }] },
  },
};

const labelList = { type: 'array', items: { type: 'string', minLength: 1 }, minItems: 1 };
export const encoderSchemaSchema = {
  anyOf: [
    labelList,
    {
      type: 'object', minProperties: 1,
      properties: {
        entities: { anyOf: [labelList, { type: 'array', minItems: 1, items: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1 }, description: { type: 'string' } } } }, { type: 'object', minProperties: 1, additionalProperties: { type: 'string' } }] },
        classifications: { type: 'array', minItems: 1, items: { type: 'object', required: ['task', 'labels'], properties: { task: { type: 'string', minLength: 1 }, labels: { type: 'array', items: { type: 'string' }, minItems: 2 }, multi_label: { type: 'boolean' }, cls_threshold: { type: 'number', minimum: 0, maximum: 1 } } } },
        structures: { type: 'object', minProperties: 1 },
        relations: { type: 'array', minItems: 1, items: { anyOf: [{ type: 'string', minLength: 1 }, { type: 'object' }] } },
      },
      additionalProperties: false,
    },
  ],
};

const common = {
  model_id: { type: 'string', minLength: 1 },
  store: { type: 'boolean' },
  project_id: { type: 'string', minLength: 1 },
};

export const encoderRequest = {
  type: 'object', required: ['model_id', 'text'],
  properties: {
    ...common,
    text: { anyOf: [{ type: 'string', minLength: 1 }, { type: 'array', minItems: 1, maxItems: 10_000, items: { type: 'string', minLength: 1 } }] },
    schema: encoderSchemaSchema,
    threshold: { type: 'number', minimum: 0, maximum: 1 },
    include_confidence: { type: 'boolean' },
    include_spans: { type: 'boolean' },
    task: { type: 'string' },
  },
};

export const decoderRequest = {
  type: 'object', required: ['model_id', 'messages'],
  properties: {
    ...common,
    task: { const: 'generate' },
    messages: { type: 'array', minItems: 1, items: messageSchema },
    max_tokens: { type: 'integer', minimum: 1, maximum: 131072 },
    temperature: { type: 'number', minimum: 0, maximum: 2 },
    top_p: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
    top_k: { type: 'integer', minimum: 0 },
    seed: { type: 'integer' },
    stop: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' }, maxItems: 16 }] },
  },
};

/** POST /inference: decoder form when `messages` is present, encoder form otherwise */
export const inferenceRequest = {
  type: 'object',
  if: { required: ['messages'] },
  then: decoderRequest,
  else: encoderRequest,
};

export const projectInferenceRequest = {
  type: 'object', required: ['text'],
  properties: {
    text: { type: 'string', minLength: 1 },
    schema: encoderSchemaSchema,
    task: { type: 'string' },
    threshold: { type: 'number', minimum: 0, maximum: 1 },
    include_confidence: { type: 'boolean' },
    include_spans: { type: 'boolean' },
    max_tokens: { type: 'integer', minimum: 1, maximum: 131072 },
    temperature: { type: 'number', minimum: 0, maximum: 2 },
    store: { type: 'boolean' },
  },
};

export const feedbackRequest = {
  type: 'object', required: ['verdict'],
  properties: {
    verdict: { enum: ['correct', 'incorrect'] },
    corrected_output: { type: ['object', 'null'] },
    notes: { type: ['string', 'null'], maxLength: 5000 },
  },
};
