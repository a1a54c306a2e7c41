// Request parsing: each compatibility endpoint's body → one CompatRequest.
//
// Cache markers (spec "Prompt caching"): honoured on
//   /v1/chat/completions  system (and developer) or user content blocks
//   /v1/messages          system blocks, message blocks, tools
//   /v1/responses         content blocks of system or developer input messages
//   /v1/completions       none (the prompt is one opaque string)
// A string `system` cannot carry one. Markers are counted in prompt order (tools, system,
// messages); the first 4 are applied and the rest dropped. Markers anywhere else are ignored.
import { CompatError, invalidParam } from './errors.ts';
import {
  chatCompletionsSchema,
  completionsSchema,
  countTokensSchema,
  embeddingsSchema,
  messagesSchema,
  responsesSchema,
  validateBody,
} from './schemas.ts';
import { randomId } from './tools.ts';
import type {
  CacheControl,
  ChatMessage,
  CompatRequest,
  ResponseFormat,
  SamplingParams,
  TextBlock,
  ToolChoice,
  ToolDef,
} from './types.ts';

export const MAX_CACHE_MARKERS = 4;

type Obj = Record<string, any>;

const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);

function stopList(v: unknown): string[] {
  if (typeof v === 'string') return v ? [v] : [];
  if (Array.isArray(v)) return v.filter((s): s is string => typeof s === 'string' && s.length > 0);
  return [];
}

/** Applies the at-most-4 rule in prompt order over every marker slot that the endpoint honours. */
class MarkerBudget {
  applied = 0;
  dropped = 0;
  take(cc: unknown): CacheControl | undefined {
    if (!cc || typeof cc !== 'object') return undefined;
    if (this.applied >= MAX_CACHE_MARKERS) {
      this.dropped++;
      return undefined;
    }
    this.applied++;
    const c = cc as { ttl?: string };
    return c.ttl ? { type: 'ephemeral', ttl: c.ttl } : { type: 'ephemeral' };
  }
}

function textOfParts(parts: Obj[], param: string, allowed: Set<string>): string[] {
  return parts.map((p, i) => {
    if (!allowed.has(p.type)) {
      throw invalidParam(`${param}[${i}].type`, `Content block type '${p.type}' is not supported: this service's models take text only.`, 'unsupported_content_type');
    }
    if (typeof p.text !== 'string') throw invalidParam(`${param}[${i}].text`, `Missing required parameter: '${param}[${i}].text'.`, 'missing_required_parameter');
    return p.text;
  });
}

function blocks(content: unknown, param: string, honour: boolean, budget: MarkerBudget, allowed: Set<string>): TextBlock[] {
  if (content == null) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  const parts = content as Obj[];
  const texts = textOfParts(parts, param, allowed);
  return parts.map((p, i) => {
    const b: TextBlock = { type: 'text', text: texts[i]! };
    if (honour) {
      const cc = budget.take(p.cache_control);
      if (cc) b.cache_control = cc;
    }
    return b;
  });
}

function responseFormat(rf: Obj | null | undefined, param: string): ResponseFormat | undefined {
  if (!rf || rf.type === 'text') return undefined;
  if (rf.type === 'json_object') return { type: 'json_object' };
  // chat: {type, json_schema: {name, schema, strict}}; responses: {type, name, schema, strict}
  const js = rf.json_schema ?? rf;
  if (!js.schema || typeof js.schema !== 'object') {
    throw invalidParam(`${param}.schema`, `Missing required parameter: '${param}.schema'.`, 'missing_required_parameter');
  }
  return { type: 'json_schema', name: js.name, schema: js.schema, strict: js.strict ?? undefined };
}

function baseParams(b: Obj): SamplingParams {
  return {
    temperature: num(b.temperature),
    top_p: num(b.top_p),
    top_k: num(b.top_k),
    seed: num(b.seed),
    presence_penalty: num(b.presence_penalty),
    frequency_penalty: num(b.frequency_penalty),
    repetition_penalty: num(b.repetition_penalty),
    stop: [],
    logprobs: false,
  };
}

function lastUserText(messages: ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === 'user') return messages[i]!.content.map((b) => b.text).join('\n');
  }
  return '';
}

function extractTask(b: Obj, text: string): CompatRequest['extract'] {
  if (b.schema === undefined) return undefined;
  if (!text.trim()) throw invalidParam('messages', 'A request with `schema` needs text to extract from (a user message or prompt).');
  return { text, schema: b.schema, threshold: num(b.threshold) };
}

function checkToolChoice(choice: ToolChoice | undefined, tools: ToolDef[] | undefined, param: string): void {
  if (choice && typeof choice === 'object' && !(tools ?? []).some((t) => t.name === choice.name)) {
    throw invalidParam(param, `Tool choice names function '${choice.name}', which is not in 'tools'.`);
  }
  if ((choice === 'required' || typeof choice === 'object') && !(tools && tools.length)) {
    throw invalidParam(param, `'${param}' requires 'tools'.`);
  }
}

const CHAT_PARTS = new Set(['text', 'input_text']);

// ---------------------------------------------------------------- /v1/chat/completions

export function normalizeChatCompletions(body: unknown): CompatRequest {
  const b = validateBody<Obj>(chatCompletionsSchema, body);
  const budget = new MarkerBudget();
  const messages: ChatMessage[] = (b.messages as Obj[]).map((m, i) => {
    const role = m.role === 'developer' ? 'system' : m.role === 'function' ? 'tool' : m.role;
    const honour = role === 'system' || role === 'user';
    const msg: ChatMessage = { role, content: blocks(m.content, `messages[${i}].content`, honour, budget, CHAT_PARTS) };
    if (m.name) msg.name = m.name;
    if (role === 'tool') msg.tool_call_id = m.tool_call_id ?? m.name;
    if (role === 'assistant' && Array.isArray(m.tool_calls) && m.tool_calls.length) {
      msg.tool_calls = (m.tool_calls as Obj[]).map((c) => ({ id: c.id ?? randomId('call_'), name: c.function.name, arguments: c.function.arguments ?? '{}' }));
    }
    if (role !== 'assistant' && msg.content.length === 0) {
      throw invalidParam(`messages[${i}].content`, `Missing required parameter: 'messages[${i}].content'.`, 'missing_required_parameter');
    }
    return msg;
  });
  const tools: ToolDef[] | undefined = b.tools?.length
    ? (b.tools as Obj[]).map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters ?? { type: 'object', properties: {} } }))
    : undefined;
  const tool_choice: ToolChoice | undefined = b.tool_choice == null ? undefined : typeof b.tool_choice === 'string' ? (b.tool_choice as ToolChoice) : { name: b.tool_choice.function.name };
  checkToolChoice(tool_choice, tools, 'tool_choice');
  if (b.top_logprobs != null && !b.logprobs) throw invalidParam('top_logprobs', "'top_logprobs' requires 'logprobs' to be true.");
  const params = baseParams(b);
  params.max_tokens = num(b.max_completion_tokens) ?? num(b.max_tokens);
  params.stop = stopList(b.stop);
  params.logprobs = !!b.logprobs;
  params.top_logprobs = num(b.top_logprobs);
  params.response_format = responseFormat(b.response_format, 'response_format.json_schema');
  return {
    endpoint: 'chat',
    model: b.model,
    task: b.schema !== undefined ? 'extract' : 'generate',
    stream: !!b.stream,
    include_usage: !!b.stream_options?.include_usage,
    n: num(b.n) ?? 1,
    messages,
    tools,
    tool_choice,
    parallel_tool_calls: b.parallel_tool_calls ?? undefined,
    params,
    extract: extractTask(b, lastUserText(messages)),
    cache_markers: { applied: budget.applied, dropped: budget.dropped },
    user: b.user,
    metadata: b.metadata ?? undefined,
  };
}

// ---------------------------------------------------------------- /v1/completions

export function normalizeCompletions(body: unknown): CompatRequest {
  const b = validateBody<Obj>(completionsSchema, body);
  const prompts: unknown[] = typeof b.prompt === 'string' ? [b.prompt] : b.prompt;
  if (prompts.some((p) => typeof p !== 'string')) {
    throw invalidParam('prompt', 'Token-id prompts are not supported; send the prompt as text.', 'unsupported_value');
  }
  if (prompts.length !== 1) {
    throw invalidParam('prompt', 'Send one prompt per request (batched prompt arrays are not supported); use `n` for several completions.', 'unsupported_value');
  }
  if (b.suffix) throw invalidParam('suffix', "'suffix' (fill-in-the-middle) is not supported by this service's decoder models.", 'unsupported_value');
  const n = num(b.n) ?? 1;
  if (b.best_of != null && b.best_of !== n) throw invalidParam('best_of', "'best_of' different from 'n' is not supported.", 'unsupported_value');
  const params = baseParams(b);
  params.max_tokens = num(b.max_tokens) ?? 16; // the public API's default for this endpoint
  params.stop = stopList(b.stop);
  params.logprobs = b.logprobs != null;
  params.top_logprobs = b.logprobs != null ? b.logprobs : undefined;
  const prompt = prompts[0] as string;
  return {
    endpoint: 'completions',
    model: b.model,
    task: b.schema !== undefined ? 'extract' : 'generate',
    stream: !!b.stream,
    include_usage: !!b.stream_options?.include_usage,
    n,
    prompt,
    echo: !!b.echo,
    params,
    extract: extractTask(b, prompt),
    cache_markers: { applied: 0, dropped: 0 },
    user: b.user,
    metadata: b.metadata ?? undefined,
  };
}

// ---------------------------------------------------------------- /v1/responses

const RESP_PARTS = new Set(['input_text', 'output_text', 'text']);

export function normalizeResponses(body: unknown): CompatRequest {
  const b = validateBody<Obj>(responsesSchema, body);
  if (b.previous_response_id) {
    throw invalidParam('previous_response_id', "'previous_response_id' is not supported: send the whole conversation in 'input'.", 'unsupported_value');
  }
  const budget = new MarkerBudget();
  const messages: ChatMessage[] = [];
  if (typeof b.instructions === 'string' && b.instructions) messages.push({ role: 'system', content: [{ type: 'text', text: b.instructions }] });
  if (typeof b.input === 'string') {
    messages.push({ role: 'user', content: [{ type: 'text', text: b.input }] });
  } else {
    (b.input as Obj[]).forEach((item, i) => {
      const type = item.type ?? 'message';
      if (type === 'message') {
        if (!item.role) throw invalidParam(`input[${i}].role`, `Missing required parameter: 'input[${i}].role'.`, 'missing_required_parameter');
        if (item.content == null) throw invalidParam(`input[${i}].content`, `Missing required parameter: 'input[${i}].content'.`, 'missing_required_parameter');
        const role = item.role === 'developer' ? 'system' : item.role;
        const honour = item.role === 'system' || item.role === 'developer';
        messages.push({ role, content: blocks(item.content, `input[${i}].content`, honour, budget, RESP_PARTS) });
      } else if (type === 'function_call') {
        if (typeof item.name !== 'string') throw invalidParam(`input[${i}].name`, `Missing required parameter: 'input[${i}].name'.`, 'missing_required_parameter');
        const call = { id: item.call_id ?? randomId('call_'), name: item.name, arguments: item.arguments ?? '{}' };
        const last = messages[messages.length - 1];
        if (last && last.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
        else messages.push({ role: 'assistant', content: [], tool_calls: [call] });
      } else if (type === 'function_call_output') {
        const out = typeof item.output === 'string' ? item.output : JSON.stringify(item.output ?? '');
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: [{ type: 'text', text: out }] });
      } else {
        throw invalidParam(`input[${i}].type`, `Input item type '${type}' is not supported.`, 'unsupported_value');
      }
    });
  }
  let tools: ToolDef[] | undefined;
  if (b.tools?.length) {
    tools = (b.tools as Obj[]).map((t, i) => {
      if (t.type !== 'function') throw invalidParam(`tools[${i}].type`, `Tool type '${t.type}' is not supported; only 'function' tools are.`, 'unsupported_value');
      if (!t.name) throw invalidParam(`tools[${i}].name`, `Missing required parameter: 'tools[${i}].name'.`, 'missing_required_parameter');
      return { name: t.name, description: t.description ?? undefined, parameters: t.parameters ?? { type: 'object', properties: {} } };
    });
  }
  const tool_choice: ToolChoice | undefined =
    b.tool_choice == null ? undefined : typeof b.tool_choice === 'string' ? (b.tool_choice as ToolChoice) : { name: b.tool_choice.name };
  checkToolChoice(tool_choice, tools, 'tool_choice');
  const params = baseParams(b);
  params.max_tokens = num(b.max_output_tokens);
  params.top_logprobs = num(b.top_logprobs);
  params.logprobs = params.top_logprobs != null;
  params.response_format = responseFormat(b.text?.format, 'text.format');
  return {
    endpoint: 'responses',
    model: b.model,
    task: b.schema !== undefined ? 'extract' : 'generate',
    stream: !!b.stream,
    include_usage: true,
    n: 1,
    messages,
    tools,
    tool_choice,
    parallel_tool_calls: b.parallel_tool_calls ?? undefined,
    params,
    extract: extractTask(b, lastUserText(messages)),
    cache_markers: { applied: budget.applied, dropped: budget.dropped },
    user: b.user,
    instructions: b.instructions ?? null,
    metadata: b.metadata ?? undefined,
  };
}

// ---------------------------------------------------------------- /v1/messages

const MSG_TEXT = new Set(['text']);

export function normalizeMessages(body: unknown, schema: object = messagesSchema): CompatRequest {
  const b = validateBody<Obj>(schema, body);
  const budget = new MarkerBudget();
  // prompt order: tools, system, messages
  let tools: ToolDef[] | undefined;
  if (b.tools?.length) {
    tools = (b.tools as Obj[]).map((t) => {
      const def: ToolDef = { name: t.name, description: t.description, parameters: t.input_schema ?? { type: 'object', properties: {} } };
      const cc = budget.take(t.cache_control);
      if (cc) def.cache_control = cc;
      return def;
    });
  }
  const messages: ChatMessage[] = [];
  if (b.system !== undefined) {
    const sys = blocks(b.system, 'system', true, budget, MSG_TEXT);
    if (sys.length) messages.push({ role: 'system', content: sys });
  }
  (b.messages as Obj[]).forEach((m, i) => {
    const param = `messages[${i}].content`;
    if (typeof m.content === 'string') {
      messages.push({ role: m.role, content: [{ type: 'text', text: m.content }] });
      return;
    }
    const msg: ChatMessage = { role: m.role, content: [] };
    const toolResults: ChatMessage[] = [];
    (m.content as Obj[]).forEach((blk, j) => {
      const p = `${param}[${j}]`;
      if (blk.type === 'text') {
        if (typeof blk.text !== 'string') throw invalidParam(`${p}.text`, `Missing required parameter: '${p}.text'.`, 'missing_required_parameter');
        const tb: TextBlock = { type: 'text', text: blk.text };
        const cc = budget.take(blk.cache_control);
        if (cc) tb.cache_control = cc;
        msg.content.push(tb);
      } else if (blk.type === 'tool_use') {
        if (m.role !== 'assistant') throw invalidParam(`${p}.type`, "'tool_use' blocks belong to assistant messages.");
        if (typeof blk.name !== 'string') throw invalidParam(`${p}.name`, `Missing required parameter: '${p}.name'.`, 'missing_required_parameter');
        (msg.tool_calls ??= []).push({ id: blk.id ?? randomId('toolu_'), name: blk.name, arguments: JSON.stringify(blk.input ?? {}) });
        const cc = budget.take(blk.cache_control);
        if (cc) msg.content.push({ type: 'text', text: '', cache_control: cc });
      } else if (blk.type === 'tool_result') {
        if (m.role !== 'user') throw invalidParam(`${p}.type`, "'tool_result' blocks belong to user messages.");
        const inner: TextBlock[] = typeof blk.content === 'string' || blk.content == null
          ? [{ type: 'text', text: blk.content ?? '' }]
          : textOfParts(blk.content, `${p}.content`, MSG_TEXT).map((text) => ({ type: 'text' as const, text }));
        const cc = budget.take(blk.cache_control);
        if (cc && inner.length) inner[inner.length - 1]!.cache_control = cc;
        toolResults.push({ role: 'tool', tool_call_id: blk.tool_use_id, content: inner });
      } else {
        throw invalidParam(`${p}.type`, `Content block type '${blk.type}' is not supported: this service's models take text only.`, 'unsupported_content_type');
      }
    });
    // tool results answer the previous assistant turn, so they come before the user's own text
    messages.push(...toolResults);
    if (msg.content.length || msg.tool_calls) messages.push(msg);
  });
  if (b.cache_control) {
    // the request-level marker goes on the last block of the prompt (after the explicit ones)
    const last = messages[messages.length - 1];
    const blk = last?.content[last.content.length - 1];
    const cc = budget.take(b.cache_control);
    if (cc && blk) blk.cache_control = cc;
  }
  let tool_choice: ToolChoice | undefined;
  if (b.tool_choice) {
    const tc = b.tool_choice as Obj;
    if (tc.type === 'tool') {
      if (!tc.name) throw invalidParam('tool_choice.name', "Missing required parameter: 'tool_choice.name'.", 'missing_required_parameter');
      tool_choice = { name: tc.name };
    } else tool_choice = tc.type === 'any' ? 'required' : tc.type;
  }
  checkToolChoice(tool_choice, tools, 'tool_choice');
  const params = baseParams(b);
  params.max_tokens = b.max_tokens;
  params.stop = stopList(b.stop_sequences);
  const fmt = b.output_config?.format;
  if (fmt) params.response_format = { type: 'json_schema', name: 'output', schema: fmt.schema };
  return {
    endpoint: 'messages',
    model: b.model,
    task: b.schema !== undefined ? 'extract' : 'generate',
    stream: !!b.stream,
    include_usage: true,
    n: 1,
    messages,
    tools,
    tool_choice,
    parallel_tool_calls: b.tool_choice?.disable_parallel_tool_use ? false : undefined,
    params,
    extract: extractTask(b, lastUserText(messages)),
    cache_markers: { applied: budget.applied, dropped: budget.dropped },
    user: b.metadata?.user_id ?? undefined,
    metadata: undefined,
  };
}

/** POST /v1/messages/count_tokens: the same body as /v1/messages, `max_tokens` optional. */
export function normalizeCountTokens(body: unknown): CompatRequest {
  return normalizeMessages(body, countTokensSchema);
}

// ---------------------------------------------------------------- /v1/embeddings

export interface EmbeddingsRequest {
  model: string;
  input: string[];
  encoding_format: 'float' | 'base64';
  dimensions?: number;
  user?: string;
}

export function normalizeEmbeddings(body: unknown): EmbeddingsRequest {
  const b = validateBody<Obj>(embeddingsSchema, body);
  const input: unknown[] = typeof b.input === 'string' ? [b.input] : b.input;
  if (input.some((s) => typeof s !== 'string')) {
    throw invalidParam('input', 'Token-id inputs are not supported; send the input as text.', 'unsupported_value');
  }
  input.forEach((s, i) => {
    if ((s as string).length === 0) throw invalidParam(typeof b.input === 'string' ? 'input' : `input[${i}]`, 'Input text must not be empty.');
  });
  return { model: b.model, input: input as string[], encoding_format: b.encoding_format ?? 'float', dimensions: num(b.dimensions), user: b.user };
}

/** Parses a request body buffer; malformed JSON is a 400 in the caller's error style. */
export function parseJsonBody(buf: Buffer | string): unknown {
  const text = typeof buf === 'string' ? buf : buf.toString('utf8');
  if (!text.trim()) throw new CompatError(400, 'The request body is empty; send a JSON object.', { code: 'invalid_json' });
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new CompatError(400, `The request body is not valid JSON: ${(e as Error).message}`, { code: 'invalid_json' });
  }
}
