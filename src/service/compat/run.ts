// Executes a normalized CompatRequest against the ModelRuntime seam and reports progress as a
// stream of RunEvents, the same for streaming and non-streaming callers:
//   {type: 'start', index, usage}            the prompt is processed: its input usage (completion 0);
//                                            at most once per choice, before its text, when the
//                                            runtime reports it
//   {type: 'text', index, text, logprobs?}   content that may be shown now (tool-call text held back)
//   {type: 'choice', result}                 one choice finished (tool calls parsed)
//   {type: 'done', usage}                    everything finished; usage summed over the choices
// `n` choices run concurrently (the scheduler batches them); cancelling the signal stops them at
// once (the runtime frees their KV blocks).
import type { EncoderSchema, GenerateMessage, GenerateParams, ModelRef, ModelRuntime } from '../runtime.ts';
import { invalidParam } from './errors.ts';
import { forcedToolSchema, parseToolCalls, ToolCallGate, toolsForTemplate, toolsSystemPrompt } from './tools.ts';
import type { ChatMessage, ChoiceResult, CompatRequest, FinishReason, TextBlock, TokenLogprob, Usage } from './types.ts';
import { addUsage, ZERO_USAGE } from './build.ts';

export type RunEvent =
  | { type: 'start'; index: number; usage: Usage }
  | { type: 'text'; index: number; text: string; logprobs?: TokenLogprob[] }
  | { type: 'choice'; result: ChoiceResult }
  | { type: 'done'; usage: Usage };

export interface RunOptions {
  signal?: AbortSignal;
  /** the model's chat template renders `tools` itself; otherwise a system prompt describes them */
  templateSupportsTools?: boolean;
  /** 'toolu_' for messages-style ids, 'call_' otherwise */
  toolIdPrefix?: string;
  /** extra runtime parameters (e.g. `cache: {mode}` from the model's caching family) */
  extraParams?: Record<string, unknown>;
}

/** The `schema` extension (same shapes as POST /inference) → the runtime's normalized schema. */
export function toEncoderSchema(schema: unknown, param = 'schema'): EncoderSchema {
  if (Array.isArray(schema)) return { entities: schema.map((name) => ({ name: String(name) })) };
  const s = schema as Record<string, unknown>;
  const out: EncoderSchema = {};
  if (s.entities !== undefined) {
    if (Array.isArray(s.entities)) {
      out.entities = s.entities.map((e, i) => {
        if (typeof e === 'string') return { name: e };
        if (e && typeof e === 'object' && typeof (e as { name?: unknown }).name === 'string') return e as { name: string; description?: string };
        throw invalidParam(`${param}.entities[${i}]`, 'An entity is a label string or an object with a `name`.');
      });
    } else if (s.entities && typeof s.entities === 'object') {
      // {label: description} form
      out.entities = Object.entries(s.entities).map(([name, d]) => ({ name, ...(typeof d === 'string' ? { description: d } : {}) }));
    } else throw invalidParam(`${param}.entities`, "'entities' must be an array of labels.");
  }
  if (s.classifications !== undefined) {
    if (!Array.isArray(s.classifications)) throw invalidParam(`${param}.classifications`, "'classifications' must be an array of {task, labels}.");
    out.classifications = s.classifications.map((c, i) => {
      const cc = c as { task?: unknown; labels?: unknown };
      if (typeof cc?.task !== 'string' || !Array.isArray(cc.labels) || !cc.labels.every((l) => typeof l === 'string')) {
        throw invalidParam(`${param}.classifications[${i}]`, 'A classification is {task: string, labels: string[]}.');
      }
      return c as { task: string; labels: string[] };
    });
  }
  if (s.structures !== undefined) {
    if (!s.structures || typeof s.structures !== 'object' || Array.isArray(s.structures)) throw invalidParam(`${param}.structures`, "'structures' must be an object.");
    out.structures = s.structures as Record<string, unknown>;
  }
  if (s.relations !== undefined) {
    if (!Array.isArray(s.relations)) throw invalidParam(`${param}.relations`, "'relations' must be an array.");
    out.relations = s.relations as EncoderSchema['relations'];
  }
  if (!out.entities && !out.classifications && !out.structures && !out.relations) {
    throw invalidParam(param, "'schema' needs at least one of entities, classifications, structures, relations.");
  }
  return out;
}

function toGenerateMessages(messages: ChatMessage[], nativeTools: boolean): GenerateMessage[] {
  return messages.map((m) => {
    const hasMarker = m.content.some((b) => b.cache_control);
    let content: GenerateMessage['content'] = hasMarker ? m.content.map((b) => ({ ...b })) : m.content.map((b) => b.text).join('');
    const out: GenerateMessage & Record<string, unknown> = { role: m.role, content };
    if (m.tool_calls?.length) {
      if (nativeTools) {
        out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: safeJson(c.arguments) } }));
      } else {
        const text = m.tool_calls.map((c) => `<tool_call>${JSON.stringify({ name: c.name, arguments: safeJson(c.arguments) })}</tool_call>`).join('\n');
        out.content = typeof content === 'string' ? (content ? content + '\n' : '') + text : [...content, { type: 'text', text }];
      }
    }
    if (m.role === 'tool') {
      if (m.tool_call_id) out.tool_call_id = m.tool_call_id;
      if (m.name) out.name = m.name;
    }
    return out;
  });
}

function safeJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return s;
  }
}

function finishReason(raw: string): FinishReason {
  if (raw === 'length' || raw === 'max_tokens') return 'length';
  if (raw === 'cancelled' || raw === 'abort' || raw === 'aborted') return 'cancelled';
  if (raw === 'content_filter') return 'content_filter';
  return 'stop';
}

/** Generation parameters of choice `i` for the runtime. */
export function generateParams(req: CompatRequest, i: number, opts: RunOptions): GenerateParams {
  const p = req.params;
  const toolsOn = !!req.tools?.length && req.tool_choice !== 'none';
  const params: GenerateParams = {
    max_tokens: p.max_tokens,
    temperature: p.temperature,
    top_p: p.top_p,
    top_k: p.top_k,
    seed: p.seed !== undefined ? p.seed + i : undefined,
    stop: p.stop.length ? p.stop : undefined,
    presence_penalty: p.presence_penalty,
    frequency_penalty: p.frequency_penalty,
    repetition_penalty: p.repetition_penalty,
    signal: opts.signal,
    ...opts.extraParams,
  };
  // top_p 0 (allowed by the public APIs) keeps only the most likely token: greedy decoding
  if (p.top_p === 0) {
    params.top_p = undefined;
    params.temperature = 0;
  }
  if (p.logprobs) {
    params.logprobs = true;
    if (p.top_logprobs !== undefined) params.top_logprobs = p.top_logprobs;
  }
  let rf = p.response_format;
  if (toolsOn) {
    const forced = forcedToolSchema(req.tools!, req.tool_choice);
    if (forced) rf = forced;
  }
  // the runtime's shape: {type: 'json_schema', json_schema: {schema, name}} | {type: 'json_object'}
  if (rf && rf.type === 'json_object') params.response_format = { type: 'json_object' };
  else if (rf && rf.type === 'json_schema') params.response_format = { type: 'json_schema', json_schema: { schema: rf.schema, name: rf.name } };
  if (req.prompt !== undefined) {
    params.prompt = req.prompt;
  } else {
    let messages = req.messages!;
    // a marker on a tool definition caches through the end of the tool descriptions
    const toolMarker = req.tools?.find((t) => t.cache_control)?.cache_control;
    if (toolsOn && !opts.templateSupportsTools) {
      const block: TextBlock = { type: 'text', text: toolsSystemPrompt(req.tools!, req.tool_choice) };
      if (toolMarker) block.cache_control = toolMarker;
      messages = [{ role: 'system', content: [block] }, ...messages];
    }
    params.messages = toGenerateMessages(messages, !!opts.templateSupportsTools);
    if (toolsOn && opts.templateSupportsTools) params.tools = toolsForTemplate(req.tools!);
  }
  return params;
}

export async function* runCompat(rt: ModelRuntime, ref: ModelRef, req: CompatRequest, opts: RunOptions = {}): AsyncGenerator<RunEvent> {
  if (req.task === 'extract') {
    const ex = req.extract!;
    const schema = toEncoderSchema(ex.schema);
    const out = await rt.extract(ref, [ex.text], schema, { threshold: ex.threshold ?? 0.5, include_confidence: true, include_spans: true, signal: opts.signal });
    const text = JSON.stringify(out.results[0] ?? {});
    const usage: Usage = { prompt_tokens: out.input_tokens, completion_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 };
    for (let i = 0; i < req.n; i++) {
      yield { type: 'start', index: i, usage };
      yield { type: 'text', index: i, text };
      yield { type: 'choice', result: { index: i, text, finish_reason: 'stop' } };
    }
    yield { type: 'done', usage };
    return;
  }
  const toolsOn = !!req.tools?.length && req.tool_choice !== 'none';
  const forced = toolsOn && !!forcedToolSchema(req.tools!, req.tool_choice);
  const idPrefix = opts.toolIdPrefix ?? 'call_';
  // one async queue fed by n concurrent generations
  const queue: RunEvent[] = [];
  let wake: (() => void) | null = null;
  let failure: unknown = null;
  let running = req.n;
  let usage: Usage = ZERO_USAGE;
  const push = (e: RunEvent) => {
    queue.push(e);
    wake?.();
  };
  const one = async (i: number) => {
    const gate = toolsOn && !forced ? new ToolCallGate() : null;
    let full = '';
    const lps: TokenLogprob[] = [];
    try {
      for await (const ev of rt.generate(ref, generateParams(req, i, opts))) {
        if (ev.type === 'start') {
          const u = ev.usage;
          const cache = { cache_read_tokens: u.cache_read_tokens ?? 0, cache_write_tokens: u.cache_write_tokens ?? 0 };
          push({ type: 'start', index: i, usage: { prompt_tokens: u.prompt_tokens, completion_tokens: 0, ...cache } });
        } else if (ev.type === 'delta') {
          const lp = (ev as { logprobs?: TokenLogprob[] }).logprobs;
          if (lp) lps.push(...lp);
          full += ev.text;
          if (forced) continue; // a forced call is shown as a tool call, not as text
          const shown = gate ? gate.push(ev.text) : ev.text;
          if (shown || lp?.length) push({ type: 'text', index: i, text: shown, logprobs: gate ? undefined : lp });
        } else {
          usage = addUsage(usage, {
            prompt_tokens: ev.usage.prompt_tokens,
            completion_tokens: ev.usage.completion_tokens,
            cache_read_tokens: ev.usage.cache_read_tokens ?? 0,
            cache_write_tokens: ev.usage.cache_write_tokens ?? 0,
          });
          const text = ev.text ?? full;
          let content = text;
          let calls: ChoiceResult['tool_calls'];
          if (toolsOn) {
            const parsed = parseToolCalls(text, req.tools!, idPrefix);
            if (parsed.calls.length) {
              calls = req.parallel_tool_calls === false ? parsed.calls.slice(0, 1) : parsed.calls;
              content = parsed.content;
            } else if (gate) {
              const held = gate.end();
              if (held) push({ type: 'text', index: i, text: held });
            } else if (forced && text) {
              push({ type: 'text', index: i, text });
            }
          }
          let fr = finishReason(ev.finish_reason);
          if (calls?.length && fr === 'stop') fr = 'tool_calls';
          const stopSeq = (ev as { stop_sequence?: string | null }).stop_sequence ?? null;
          push({
            type: 'choice',
            result: { index: i, text: content, finish_reason: fr, stop_sequence: stopSeq, tool_calls: calls, logprobs: req.params.logprobs ? lps : undefined },
          });
        }
      }
    } catch (e) {
      failure ??= e;
    } finally {
      running--;
      wake?.();
    }
  };
  for (let i = 0; i < req.n; i++) void one(i);
  while (true) {
    while (queue.length) yield queue.shift()!;
    if (failure) throw failure;
    if (running === 0) break;
    await new Promise<void>((r) => (wake = r));
    wake = null;
  }
  while (queue.length) yield queue.shift()!;
  if (failure) throw failure;
  yield { type: 'done', usage };
}

/** Runs to completion (non-streaming): the finished choices in index order and the usage. */
export async function runCompatToEnd(rt: ModelRuntime, ref: ModelRef, req: CompatRequest, opts: RunOptions = {}): Promise<{ choices: ChoiceResult[]; usage: Usage }> {
  const choices: ChoiceResult[] = [];
  let usage = ZERO_USAGE;
  for await (const ev of runCompat(rt, ref, req, opts)) {
    if (ev.type === 'choice') choices[ev.result.index] = ev.result;
    else if (ev.type === 'done') usage = ev.usage;
  }
  return { choices, usage };
}

/** Characters of all prompt text (the router's length estimate). */
export function promptChars(req: CompatRequest): number {
  if (req.prompt !== undefined) return req.prompt.length;
  let n = 0;
  for (const m of req.messages ?? []) for (const b of m.content) n += b.text.length;
  for (const t of req.tools ?? []) n += JSON.stringify(t.parameters).length + t.name.length + (t.description?.length ?? 0);
  return n;
}
