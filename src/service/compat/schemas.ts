// ajv schemas of the compatibility request bodies. Unknown fields are ignored (no
// additionalProperties: false anywhere), as the public APIs ignore them; a wrong type, a missing
// required field or an out-of-range value is a 422 naming the offending `param`.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { CompatError } from './errors.ts';

const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false });

const nullable = (s: Record<string, unknown>) => ({ anyOf: [s, { type: 'null' }] });

const cacheControl = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string', enum: ['ephemeral'] },
    ttl: { type: 'string', pattern: '^[0-9]+(s|m|h)$' },
  },
};

// the `schema` extension: a flat label list, or an object with entities/classifications/...
const schemaExtension = {
  anyOf: [
    { type: 'array', items: { type: 'string' } },
    { type: 'object' },
  ],
};

const stop = nullable({ anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' }, maxItems: 16 }] });

const chatContentPart = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string' },
    text: { type: 'string' },
    cache_control: nullable(cacheControl),
  },
};

const openaiToolCall = {
  type: 'object',
  required: ['function'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string' },
    function: {
      type: 'object',
      required: ['name'],
      properties: { name: { type: 'string' }, arguments: { type: 'string' } },
    },
  },
};

const functionName = { type: 'string', pattern: '^[a-zA-Z0-9_.-]{1,64}$' };

const openaiTool = {
  type: 'object',
  required: ['type', 'function'],
  properties: {
    type: { type: 'string', enum: ['function'] },
    function: {
      type: 'object',
      required: ['name'],
      properties: {
        name: functionName,
        description: { type: 'string' },
        parameters: { type: 'object' },
        strict: nullable({ type: 'boolean' }),
      },
    },
  },
};

const common = {
  model: { type: 'string', minLength: 1 },
  stream: nullable({ type: 'boolean' }),
  temperature: nullable({ type: 'number', minimum: 0, maximum: 2 }),
  top_p: nullable({ type: 'number', minimum: 0, maximum: 1 }),
  top_k: nullable({ type: 'integer', minimum: 0 }),
  seed: nullable({ type: 'integer' }),
  presence_penalty: nullable({ type: 'number', minimum: -2, maximum: 2 }),
  frequency_penalty: nullable({ type: 'number', minimum: -2, maximum: 2 }),
  repetition_penalty: nullable({ type: 'number', exclusiveMinimum: 0 }),
  user: { type: 'string' },
  schema: schemaExtension,
  threshold: { type: 'number', minimum: 0, maximum: 1 },
  metadata: nullable({ type: 'object' }),
};

export const chatCompletionsSchema = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    ...common,
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role'],
        properties: {
          role: { type: 'string', enum: ['system', 'developer', 'user', 'assistant', 'tool', 'function'] },
          content: nullable({ anyOf: [{ type: 'string' }, { type: 'array', items: chatContentPart }] }),
          name: { type: 'string' },
          tool_call_id: { type: 'string' },
          tool_calls: nullable({ type: 'array', items: openaiToolCall }),
        },
      },
    },
    stream_options: nullable({ type: 'object', properties: { include_usage: { type: 'boolean' } } }),
    max_tokens: nullable({ type: 'integer', minimum: 1 }),
    max_completion_tokens: nullable({ type: 'integer', minimum: 1 }),
    n: nullable({ type: 'integer', minimum: 1, maximum: 16 }),
    stop,
    logprobs: nullable({ type: 'boolean' }),
    top_logprobs: nullable({ type: 'integer', minimum: 0, maximum: 20 }),
    response_format: nullable({
      type: 'object',
      required: ['type'],
      properties: {
        type: { type: 'string', enum: ['text', 'json_object', 'json_schema'] },
        json_schema: {
          type: 'object',
          required: ['name'],
          properties: {
            name: { type: 'string' },
            description: { type: 'string' },
            schema: { type: 'object' },
            strict: nullable({ type: 'boolean' }),
          },
        },
      },
    }),
    tools: nullable({ type: 'array', items: openaiTool }),
    tool_choice: nullable({
      anyOf: [
        { type: 'string', enum: ['none', 'auto', 'required'] },
        {
          type: 'object',
          required: ['type', 'function'],
          properties: {
            type: { type: 'string', enum: ['function'] },
            function: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } },
          },
        },
      ],
    }),
    parallel_tool_calls: nullable({ type: 'boolean' }),
  },
};

export const completionsSchema = {
  type: 'object',
  required: ['model', 'prompt'],
  properties: {
    ...common,
    prompt: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, maxItems: 16, items: { type: 'string' } },
        // token arrays are recognised so they can get a precise 422 from normalization
        { type: 'array', minItems: 1, items: { type: 'integer' } },
        { type: 'array', minItems: 1, items: { type: 'array', items: { type: 'integer' } } },
      ],
    },
    stream_options: nullable({ type: 'object', properties: { include_usage: { type: 'boolean' } } }),
    max_tokens: nullable({ type: 'integer', minimum: 1 }),
    n: nullable({ type: 'integer', minimum: 1, maximum: 16 }),
    best_of: nullable({ type: 'integer', minimum: 1, maximum: 16 }),
    stop,
    echo: nullable({ type: 'boolean' }),
    suffix: nullable({ type: 'string' }),
    logprobs: nullable({ type: 'integer', minimum: 0, maximum: 5 }),
  },
};

const responsesPart = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string' },
    text: { type: 'string' },
    cache_control: nullable(cacheControl),
  },
};

export const responsesSchema = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    ...common,
    input: {
      anyOf: [
        { type: 'string' },
        {
          type: 'array',
          minItems: 1,
          items: {
            type: 'object',
            properties: {
              type: { type: 'string' },
              role: { type: 'string', enum: ['user', 'assistant', 'system', 'developer'] },
              content: { anyOf: [{ type: 'string' }, { type: 'array', items: responsesPart }] },
              call_id: { type: 'string' },
              name: { type: 'string' },
              arguments: { type: 'string' },
              output: { anyOf: [{ type: 'string' }, { type: 'array' }] },
            },
          },
        },
      ],
    },
    instructions: nullable({ type: 'string' }),
    max_output_tokens: nullable({ type: 'integer', minimum: 1 }),
    top_logprobs: nullable({ type: 'integer', minimum: 0, maximum: 20 }),
    previous_response_id: nullable({ type: 'string' }),
    store: nullable({ type: 'boolean' }),
    text: nullable({
      type: 'object',
      properties: {
        format: {
          type: 'object',
          required: ['type'],
          properties: {
            type: { type: 'string', enum: ['text', 'json_object', 'json_schema'] },
            name: { type: 'string' },
            schema: { type: 'object' },
            strict: nullable({ type: 'boolean' }),
          },
        },
      },
    }),
    tools: nullable({
      type: 'array',
      items: {
        type: 'object',
        required: ['type'],
        properties: {
          type: { type: 'string' },
          name: functionName,
          description: nullable({ type: 'string' }),
          parameters: nullable({ type: 'object' }),
          strict: nullable({ type: 'boolean' }),
        },
      },
    }),
    tool_choice: nullable({
      anyOf: [
        { type: 'string', enum: ['none', 'auto', 'required'] },
        { type: 'object', required: ['type'], properties: { type: { type: 'string' }, name: { type: 'string' } } },
      ],
    }),
    parallel_tool_calls: nullable({ type: 'boolean' }),
  },
};

const messagesTextBlock = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string' },
    text: { type: 'string' },
    cache_control: nullable(cacheControl),
  },
};

export const messagesSchema = {
  type: 'object',
  required: ['model', 'max_tokens', 'messages'],
  properties: {
    ...common,
    temperature: { type: 'number', minimum: 0, maximum: 1 },
    max_tokens: { type: 'integer', minimum: 1 },
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role', 'content'],
        properties: {
          role: { type: 'string', enum: ['user', 'assistant'] },
          content: {
            anyOf: [
              { type: 'string' },
              {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['type'],
                  properties: {
                    type: { type: 'string' },
                    text: { type: 'string' },
                    id: { type: 'string' },
                    name: { type: 'string' },
                    input: { type: 'object' },
                    tool_use_id: { type: 'string' },
                    content: { anyOf: [{ type: 'string' }, { type: 'array', items: messagesTextBlock }] },
                    is_error: { type: 'boolean' },
                    cache_control: nullable(cacheControl),
                  },
                },
              },
            ],
          },
        },
      },
    },
    system: { anyOf: [{ type: 'string' }, { type: 'array', items: messagesTextBlock }] },
    stop_sequences: { type: 'array', items: { type: 'string' }, maxItems: 16 },
    tools: {
      type: 'array',
      items: {
        type: 'object',
        required: ['name'],
        properties: {
          name: functionName,
          description: { type: 'string' },
          input_schema: { type: 'object' },
          cache_control: nullable(cacheControl),
        },
      },
    },
    tool_choice: {
      type: 'object',
      required: ['type'],
      properties: {
        type: { type: 'string', enum: ['auto', 'any', 'tool', 'none'] },
        name: { type: 'string' },
        disable_parallel_tool_use: { type: 'boolean' },
      },
    },
    metadata: { type: 'object', properties: { user_id: nullable({ type: 'string' }) } },
    // request-level marker: caches through the last block of the last message
    cache_control: nullable(cacheControl),
    // structured outputs: {format: {type: 'json_schema', schema}}
    output_config: nullable({
      type: 'object',
      properties: {
        format: nullable({ type: 'object', required: ['type', 'schema'], properties: { type: { type: 'string', enum: ['json_schema'] }, schema: { type: 'object' } } }),
      },
    }),
  },
};

/** POST /v1/messages/count_tokens: a messages body without `max_tokens` (nothing is generated) */
export const countTokensSchema = { ...messagesSchema, required: ['model', 'messages'] };

export const embeddingsSchema = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    model: { type: 'string', minLength: 1 },
    input: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, maxItems: 2048, items: { type: 'string' } },
        { type: 'array', minItems: 1, items: { type: 'integer' } },
        { type: 'array', minItems: 1, items: { type: 'array', items: { type: 'integer' } } },
      ],
    },
    encoding_format: { type: 'string', enum: ['float', 'base64'] },
    dimensions: { type: 'integer', minimum: 1 },
    user: { type: 'string' },
  },
};

const compiled = new Map<object, ValidateFunction>();
function compile(schema: object): ValidateFunction {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v;
}

/** `/messages/0/content` → `messages[0].content` */
export function pointerToParam(pointer: string, extra?: string): string {
  const parts = pointer.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra) parts.push(extra);
  let out = '';
  for (const p of parts) out += /^[0-9]+$/.test(p) ? `[${p}]` : out ? `.${p}` : p;
  return out;
}

function describe(err: ErrorObject): { param: string; message: string } {
  if (err.keyword === 'required') {
    const param = pointerToParam(err.instancePath, String((err.params as { missingProperty: string }).missingProperty));
    return { param, message: `Missing required parameter: '${param}'.` };
  }
  const param = pointerToParam(err.instancePath) || '(body)';
  if (err.keyword === 'type') {
    return { param, message: `Invalid type for '${param}': expected ${(err.params as { type: string }).type}.` };
  }
  if (err.keyword === 'enum') {
    const allowed = (err.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ');
    return { param, message: `Invalid value for '${param}': must be one of ${allowed}.` };
  }
  if (err.keyword === 'anyOf') return { param, message: `Invalid type or shape for '${param}'.` };
  return { param, message: `Invalid value for '${param}': ${err.message}.` };
}

/**
 * The error to report among ajv's: the most specific location wins (the deepest path, so a bad
 * field inside the branch the caller evidently meant is named), and at that location a constraint
 * error beats a type mismatch; type mismatches of alternatives at one location are merged
 * ("expected number or null").
 */
function pickError(errs: ErrorObject[]): { param: string; message: string; code: string } {
  const real = errs.filter((e) => e.keyword !== 'anyOf' && e.keyword !== 'oneOf');
  if (!real.length) return { ...(errs[0] ? describe(errs[0]) : { param: '(body)', message: 'Invalid request body.' }), code: 'invalid_value' };
  const depth = (e: ErrorObject) => e.instancePath.split('/').length + (e.keyword === 'required' ? 1 : 0);
  const max = Math.max(...real.map(depth));
  const deepest = real.filter((e) => depth(e) === max);
  const constraint = deepest.find((e) => e.keyword !== 'type');
  if (constraint) return { ...describe(constraint), code: constraint.keyword === 'required' ? 'missing_required_parameter' : 'invalid_value' };
  const first = deepest[0]!;
  const types = [...new Set(deepest.filter((e) => e.instancePath === first.instancePath).map((e) => (e.params as { type: string }).type))];
  const param = pointerToParam(first.instancePath) || '(body)';
  return { param, message: `Invalid type for '${param}': expected ${types.join(' or ')}.`, code: 'invalid_type' };
}

/** Validates `body` against `schema`; throws a 422 CompatError naming the offending param. */
export function validateBody<T>(schema: object, body: unknown): T {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new CompatError(422, 'The request body must be a JSON object.', { code: 'invalid_type' });
  }
  const v = compile(schema);
  if (!v(body)) {
    const { param, message, code } = pickError(v.errors ?? []);
    throw new CompatError(422, message, { param, code });
  }
  return body as T;
}
