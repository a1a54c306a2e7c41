// Response bodies and SSE event builders of the compatibility endpoints (spec sections 2 and 6).
//
// Non-streaming: chatCompletion, textCompletion, responseObject, messageObject.
// Streaming: one encoder class per endpoint, each turning the generation's progress into the exact
// wire text (`data: <json>\n\n`, `event: <name>\n` lines for the messages and Responses styles,
// `data: [DONE]\n\n` closing the chat/completions streams). Encoders are pure: they return strings
// and keep only the ids and counters their style needs.
import { randomId } from './tools.ts';
import type { ChoiceResult, CompatRequest, FinishReason, ServiceExtension, TokenLogprob, ToolCall, Usage } from './types.ts';

// ---------------------------------------------------------------- framing

export const SSE_DONE = 'data: [DONE]\n\n';
export function sseData(obj: unknown): string {
  return `data: ${JSON.stringify(obj)}\n\n`;
}
export function sseEvent(name: string, obj: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(obj)}\n\n`;
}

// ---------------------------------------------------------------- usage

export const ZERO_USAGE: Usage = { prompt_tokens: 0, completion_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 };

export function addUsage(a: Usage, b: Usage): Usage {
  return {
    prompt_tokens: a.prompt_tokens + b.prompt_tokens,
    completion_tokens: a.completion_tokens + b.completion_tokens,
    cache_read_tokens: a.cache_read_tokens + b.cache_read_tokens,
    cache_write_tokens: a.cache_write_tokens + b.cache_write_tokens,
  };
}

/** The spec's usage fields: the four disjoint counts and their sum. */
export function serviceUsage(u: Usage) {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    cache_read_tokens: u.cache_read_tokens,
    cache_write_tokens: u.cache_write_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens + u.cache_read_tokens + u.cache_write_tokens,
  };
}

export function chatUsage(u: Usage) {
  return {
    ...serviceUsage(u),
    prompt_tokens_details: { cached_tokens: u.cache_read_tokens },
    completion_tokens_details: { reasoning_tokens: 0 },
  };
}

export function responsesUsage(u: Usage) {
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cache_read_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    ...serviceUsage(u),
  };
}

export function messagesUsage(u: Usage) {
  return {
    input_tokens: u.prompt_tokens,
    output_tokens: u.completion_tokens,
    cache_read_input_tokens: u.cache_read_tokens,
    cache_creation_input_tokens: u.cache_write_tokens,
    ...serviceUsage(u),
  };
}

// ---------------------------------------------------------------- shared pieces

export interface BuildContext {
  id: string;
  /** unix seconds */
  created: number;
  /** the model that answered (the routed model when the router chose it) */
  model: string;
  x_service: ServiceExtension;
}

export function newContext(endpoint: CompatRequest['endpoint'], model: string, x: ServiceExtension): BuildContext {
  const prefix = endpoint === 'chat' ? 'chatcmpl-' : endpoint === 'completions' ? 'cmpl-' : endpoint === 'responses' ? 'resp_' : 'msg_';
  return { id: randomId(prefix), created: Math.floor(Date.now() / 1000), model, x_service: x };
}

function chatLogprobs(lp: TokenLogprob[] | undefined) {
  if (!lp) return null;
  return {
    content: lp.map((t) => ({
      token: t.token,
      logprob: t.logprob,
      bytes: t.bytes ?? [...Buffer.from(t.token, 'utf8')],
      top_logprobs: (t.top_logprobs ?? []).map((a) => ({ token: a.token, logprob: a.logprob, bytes: a.bytes ?? [...Buffer.from(a.token, 'utf8')] })),
    })),
    refusal: null,
  };
}

/** legacy completions logprobs: parallel arrays */
function completionLogprobs(lp: TokenLogprob[] | undefined, textOffset0: number) {
  if (!lp) return null;
  const text_offset: number[] = [];
  let off = textOffset0;
  for (const t of lp) {
    text_offset.push(off);
    off += t.token.length;
  }
  return {
    tokens: lp.map((t) => t.token),
    token_logprobs: lp.map((t) => t.logprob),
    top_logprobs: lp.map((t) => Object.fromEntries((t.top_logprobs ?? []).map((a) => [a.token, a.logprob]))),
    text_offset,
  };
}

function openaiToolCalls(calls: ToolCall[]) {
  return calls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } }));
}

// ---------------------------------------------------------------- /v1/chat/completions

export function chatCompletion(ctx: BuildContext, choices: ChoiceResult[], usage: Usage) {
  return {
    id: ctx.id,
    object: 'chat.completion' as const,
    created: ctx.created,
    model: ctx.model,
    choices: choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant' as const,
        content: c.tool_calls?.length && !c.text ? null : c.text,
        refusal: null,
        ...(c.tool_calls?.length ? { tool_calls: openaiToolCalls(c.tool_calls) } : {}),
      },
      logprobs: chatLogprobs(c.logprobs),
      finish_reason: openaiFinish(c.finish_reason),
    })),
    usage: chatUsage(usage),
    system_fingerprint: null,
    x_service: ctx.x_service,
  };
}

function openaiFinish(f: FinishReason): 'stop' | 'length' | 'tool_calls' | 'content_filter' {
  return f === 'cancelled' ? 'stop' : f;
}

export class ChatStreamEncoder {
  constructor(private ctx: BuildContext, private n: number, private includeUsage: boolean) {}
  private chunk(choices: unknown[], extra: Record<string, unknown> = {}) {
    return sseData({
      id: this.ctx.id,
      object: 'chat.completion.chunk',
      created: this.ctx.created,
      model: this.ctx.model,
      system_fingerprint: null,
      choices,
      ...(this.includeUsage ? { usage: null } : {}),
      ...extra,
    });
  }
  /** the role chunk of every choice (with x_service on the first chunk) */
  start(): string {
    let out = '';
    for (let i = 0; i < this.n; i++) {
      out += this.chunk(
        [{ index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
        i === 0 ? { x_service: this.ctx.x_service } : {},
      );
    }
    return out;
  }
  text(index: number, text: string, logprobs?: TokenLogprob[]): string {
    if (!text && !logprobs?.length) return '';
    return this.chunk([{ index, delta: { content: text }, logprobs: logprobs ? chatLogprobs(logprobs) : null, finish_reason: null }]);
  }
  /** closing chunks of one choice: its tool calls (if any), then the finish reason */
  finishChoice(c: ChoiceResult): string {
    let out = '';
    if (c.tool_calls?.length) {
      out += this.chunk([{
        index: c.index,
        delta: { tool_calls: c.tool_calls.map((t, k) => ({ index: k, id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } })) },
        logprobs: null,
        finish_reason: null,
      }]);
    }
    out += this.chunk([{ index: c.index, delta: { content: '' }, logprobs: null, finish_reason: openaiFinish(c.finish_reason) }]);
    return out;
  }
  /** the usage chunk (when asked) and [DONE] */
  end(usage: Usage): string {
    let out = '';
    if (this.includeUsage) out += this.chunk([], { usage: chatUsage(usage), x_service: this.ctx.x_service });
    return out + SSE_DONE;
  }
  error(body: unknown): string {
    return sseData(body);
  }
}

// ---------------------------------------------------------------- /v1/completions

export function textCompletion(ctx: BuildContext, choices: ChoiceResult[], usage: Usage, echoPrompt?: string) {
  return {
    id: ctx.id,
    object: 'text_completion' as const,
    created: ctx.created,
    model: ctx.model,
    choices: choices.map((c) => ({
      index: c.index,
      text: (echoPrompt ?? '') + c.text,
      logprobs: completionLogprobs(c.logprobs, echoPrompt?.length ?? 0),
      finish_reason: openaiFinish(c.finish_reason),
    })),
    usage: chatUsage(usage),
    system_fingerprint: null,
    x_service: ctx.x_service,
  };
}

export class CompletionStreamEncoder {
  private offsets: number[];
  constructor(private ctx: BuildContext, n: number, private includeUsage: boolean, private echoPrompt?: string) {
    this.offsets = new Array(n).fill(echoPrompt?.length ?? 0);
  }
  private chunk(choices: unknown[], extra: Record<string, unknown> = {}) {
    return sseData({
      id: this.ctx.id,
      object: 'text_completion',
      created: this.ctx.created,
      model: this.ctx.model,
      system_fingerprint: null,
      choices,
      ...(this.includeUsage ? { usage: null } : {}),
      ...extra,
    });
  }
  start(): string {
    if (!this.echoPrompt) return '';
    let out = '';
    for (let i = 0; i < this.offsets.length; i++) {
      out += this.chunk([{ index: i, text: this.echoPrompt, logprobs: null, finish_reason: null }], i === 0 ? { x_service: this.ctx.x_service } : {});
    }
    return out;
  }
  text(index: number, text: string, logprobs?: TokenLogprob[]): string {
    if (!text && !logprobs?.length) return '';
    const lp = completionLogprobs(logprobs, this.offsets[index]!);
    this.offsets[index]! += text.length;
    return this.chunk([{ index, text, logprobs: lp, finish_reason: null }], index === 0 && !this.sentX ? this.markX() : {});
  }
  private sentX = false;
  private markX() {
    this.sentX = true;
    return { x_service: this.ctx.x_service };
  }
  finishChoice(c: ChoiceResult): string {
    return this.chunk([{ index: c.index, text: '', logprobs: null, finish_reason: openaiFinish(c.finish_reason) }], this.sentX ? {} : this.markX());
  }
  end(usage: Usage): string {
    let out = '';
    if (this.includeUsage) out += this.chunk([], { usage: chatUsage(usage), x_service: this.ctx.x_service });
    return out + SSE_DONE;
  }
  error(body: unknown): string {
    return sseData(body);
  }
}

// ---------------------------------------------------------------- /v1/responses

export interface ResponsesEcho {
  instructions: string | null;
  max_output_tokens: number | null;
  temperature: number | null;
  top_p: number | null;
  tool_choice: unknown;
  tools: unknown[];
  text_format: unknown;
  parallel_tool_calls: boolean;
  metadata: Record<string, string>;
  user: string | null;
}

export function responsesEcho(req: CompatRequest): ResponsesEcho {
  const rf = req.params.response_format;
  return {
    instructions: req.instructions ?? null,
    max_output_tokens: req.params.max_tokens ?? null,
    temperature: req.params.temperature ?? 1,
    top_p: req.params.top_p ?? 1,
    tool_choice: req.tool_choice === undefined ? 'auto' : typeof req.tool_choice === 'object' ? { type: 'function', name: req.tool_choice.name } : req.tool_choice,
    tools: (req.tools ?? []).map((t) => ({ type: 'function', name: t.name, description: t.description ?? null, parameters: t.parameters, strict: false })),
    text_format: rf ? (rf.type === 'json_schema' ? { type: 'json_schema', name: rf.name ?? 'output', schema: rf.schema, strict: rf.strict ?? false } : rf) : { type: 'text' },
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    metadata: req.metadata ?? {},
    user: req.user ?? null,
  };
}

type OutputItem =
  | { type: 'message'; id: string; status: 'in_progress' | 'completed' | 'incomplete'; role: 'assistant'; content: Array<{ type: 'output_text'; text: string; annotations: unknown[]; logprobs: unknown[] }> }
  | { type: 'function_call'; id: string; call_id: string; name: string; arguments: string; status: 'in_progress' | 'completed' };

function responsesLogprobs(lp: TokenLogprob[] | undefined) {
  return (lp ?? []).map((t) => ({
    token: t.token,
    logprob: t.logprob,
    bytes: t.bytes ?? [...Buffer.from(t.token, 'utf8')],
    top_logprobs: (t.top_logprobs ?? []).map((a) => ({ token: a.token, logprob: a.logprob, bytes: a.bytes ?? [...Buffer.from(a.token, 'utf8')] })),
  }));
}

function responseStatus(c: ChoiceResult | null): { status: 'completed' | 'incomplete' | 'in_progress'; incomplete_details: null | { reason: string } } {
  if (!c) return { status: 'in_progress', incomplete_details: null };
  if (c.finish_reason === 'length') return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
  if (c.finish_reason === 'content_filter') return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } };
  return { status: 'completed', incomplete_details: null };
}

function responseEnvelope(ctx: BuildContext, echo: ResponsesEcho, output: OutputItem[], c: ChoiceResult | null, usage: Usage | null) {
  const st = responseStatus(c);
  return {
    id: ctx.id,
    object: 'response' as const,
    created_at: ctx.created,
    status: st.status,
    error: null,
    incomplete_details: st.incomplete_details,
    instructions: echo.instructions,
    max_output_tokens: echo.max_output_tokens,
    model: ctx.model,
    output,
    parallel_tool_calls: echo.parallel_tool_calls,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: echo.temperature,
    text: { format: echo.text_format },
    tool_choice: echo.tool_choice,
    tools: echo.tools,
    top_p: echo.top_p,
    truncation: 'disabled',
    usage: usage ? responsesUsage(usage) : null,
    user: echo.user,
    metadata: echo.metadata,
    x_service: ctx.x_service,
  };
}

function finalItems(c: ChoiceResult, msgId: string, callIds: string[]): OutputItem[] {
  const items: OutputItem[] = [];
  if (c.text || !c.tool_calls?.length) {
    items.push({
      type: 'message',
      id: msgId,
      status: c.finish_reason === 'length' ? 'incomplete' : 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: c.text, annotations: [], logprobs: responsesLogprobs(c.logprobs) }],
    });
  }
  (c.tool_calls ?? []).forEach((t, k) => {
    items.push({ type: 'function_call', id: callIds[k] ?? randomId('fc_'), call_id: t.id, name: t.name, arguments: t.arguments, status: 'completed' });
  });
  return items;
}

export function responseObject(ctx: BuildContext, echo: ResponsesEcho, c: ChoiceResult, usage: Usage) {
  const body = responseEnvelope(ctx, echo, finalItems(c, randomId('msg_'), []), c, usage);
  return { ...body, output_text: c.text };
}

export class ResponsesStreamEncoder {
  private seq = 0;
  private msgId = randomId('msg_');
  private msgOpen = false;
  private text = '';
  private lps: TokenLogprob[] = [];
  private items: OutputItem[] = [];
  constructor(private ctx: BuildContext, private echo: ResponsesEcho) {}
  private ev(type: string, fields: Record<string, unknown>): string {
    return sseEvent(type, { type, sequence_number: this.seq++, ...fields });
  }
  start(): string {
    const r = responseEnvelope(this.ctx, this.echo, [], null, null);
    return this.ev('response.created', { response: r }) + this.ev('response.in_progress', { response: r });
  }
  private openMessage(): string {
    if (this.msgOpen) return '';
    this.msgOpen = true;
    const item: OutputItem = { type: 'message', id: this.msgId, status: 'in_progress', role: 'assistant', content: [] };
    return (
      this.ev('response.output_item.added', { output_index: 0, item }) +
      this.ev('response.content_part.added', { item_id: this.msgId, output_index: 0, content_index: 0, part: { type: 'output_text', text: '', annotations: [], logprobs: [] } })
    );
  }
  textDelta(_index: number, delta: string, logprobs?: TokenLogprob[]): string {
    if (!delta) return '';
    this.text += delta;
    if (logprobs) this.lps.push(...logprobs);
    return this.openMessage() + this.ev('response.output_text.delta', { item_id: this.msgId, output_index: 0, content_index: 0, delta, logprobs: responsesLogprobs(logprobs) });
  }
  /** closes the message item, streams the tool calls, then response.completed / incomplete */
  finish(c: ChoiceResult, usage: Usage): string {
    let out = '';
    const calls = c.tool_calls ?? [];
    if (!calls.length) out += this.openMessage();
    if (this.msgOpen) {
      const part = { type: 'output_text', text: this.text, annotations: [], logprobs: responsesLogprobs(this.lps) };
      out += this.ev('response.output_text.done', { item_id: this.msgId, output_index: 0, content_index: 0, text: this.text, logprobs: part.logprobs });
      out += this.ev('response.content_part.done', { item_id: this.msgId, output_index: 0, content_index: 0, part });
      const item: OutputItem = { type: 'message', id: this.msgId, status: c.finish_reason === 'length' ? 'incomplete' : 'completed', role: 'assistant', content: [part as never] };
      this.items.push(item);
      out += this.ev('response.output_item.done', { output_index: 0, item });
    }
    for (const t of calls) {
      const idx = this.items.length;
      const id = randomId('fc_');
      out += this.ev('response.output_item.added', { output_index: idx, item: { type: 'function_call', id, call_id: t.id, name: t.name, arguments: '', status: 'in_progress' } });
      out += this.ev('response.function_call_arguments.delta', { item_id: id, output_index: idx, delta: t.arguments });
      out += this.ev('response.function_call_arguments.done', { item_id: id, output_index: idx, name: t.name, arguments: t.arguments });
      const item: OutputItem = { type: 'function_call', id, call_id: t.id, name: t.name, arguments: t.arguments, status: 'completed' };
      this.items.push(item);
      out += this.ev('response.output_item.done', { output_index: idx, item });
    }
    const response = { ...responseEnvelope(this.ctx, this.echo, this.items, c, usage) };
    out += this.ev(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
    return out;
  }
  error(status: number, message: string, code: string | null): string {
    return this.ev('error', { code: code ?? String(status), message, param: null });
  }
}

// ---------------------------------------------------------------- /v1/messages

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export function stopReason(c: ChoiceResult): StopReason {
  if (c.tool_calls?.length) return 'tool_use';
  if (c.finish_reason === 'length') return 'max_tokens';
  if (c.stop_sequence) return 'stop_sequence';
  return 'end_turn';
}

function messageContent(c: ChoiceResult) {
  const content: Array<Record<string, unknown>> = [];
  if (c.text || !c.tool_calls?.length) content.push({ type: 'text', text: c.text });
  for (const t of c.tool_calls ?? []) content.push({ type: 'tool_use', id: t.id, name: t.name, input: JSON.parse(t.arguments) });
  return content;
}

export function messageObject(ctx: BuildContext, c: ChoiceResult, usage: Usage) {
  return {
    id: ctx.id,
    type: 'message' as const,
    role: 'assistant' as const,
    model: ctx.model,
    content: messageContent(c),
    stop_reason: stopReason(c),
    stop_sequence: c.stop_sequence ?? null,
    usage: messagesUsage(usage),
    x_service: ctx.x_service,
  };
}

export class MessagesStreamEncoder {
  private block = -1; // index of the open text block, -1 when none
  private nBlocks = 0;
  constructor(private ctx: BuildContext) {}
  /** message_start (with the usage known so far) and a first ping */
  start(usage: Usage = ZERO_USAGE): string {
    return (
      sseEvent('message_start', {
        type: 'message_start',
        message: {
          id: this.ctx.id,
          type: 'message',
          role: 'assistant',
          model: this.ctx.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: messagesUsage(usage),
          x_service: this.ctx.x_service,
        },
      }) + this.ping()
    );
  }
  ping(): string {
    return sseEvent('ping', { type: 'ping' });
  }
  private openText(): string {
    if (this.block >= 0) return '';
    this.block = this.nBlocks++;
    return sseEvent('content_block_start', { type: 'content_block_start', index: this.block, content_block: { type: 'text', text: '' } });
  }
  private closeText(): string {
    if (this.block < 0) return '';
    const out = sseEvent('content_block_stop', { type: 'content_block_stop', index: this.block });
    this.block = -1;
    return out;
  }
  textDelta(_index: number, text: string): string {
    if (!text) return '';
    return this.openText() + sseEvent('content_block_delta', { type: 'content_block_delta', index: this.block, delta: { type: 'text_delta', text } });
  }
  finish(c: ChoiceResult, usage: Usage): string {
    let out = '';
    if (!c.tool_calls?.length && this.nBlocks === 0) out += this.openText();
    out += this.closeText();
    for (const t of c.tool_calls ?? []) {
      const index = this.nBlocks++;
      out += sseEvent('content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: t.id, name: t.name, input: {} } });
      out += sseEvent('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: t.arguments } });
      out += sseEvent('content_block_stop', { type: 'content_block_stop', index });
    }
    out += sseEvent('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: stopReason(c), stop_sequence: c.stop_sequence ?? null },
      usage: messagesUsage(usage),
    });
    out += sseEvent('message_stop', { type: 'message_stop' });
    return out;
  }
  error(type: string, message: string): string {
    return sseEvent('error', { type: 'error', error: { type, message } });
  }
}
