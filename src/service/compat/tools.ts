// Tool (function) calling over a plain text decoder.
//
// The tool list is rendered through the model's chat template (`tools` variable) when it has
// tool support; otherwise `toolsSystemPrompt` adds a system message describing the tools and the
// `<tool_call>` convention. The output is parsed back with `parseToolCalls`, which understands the
// formats current instruct models emit:
//   Hermes / Qwen2.5:   <tool_call>{"name": "f", "arguments": {...}}</tool_call>   (repeatable)
//   Llama 3.1+:         <|python_tag|>{"name": "f", "parameters": {...}}  or the bare JSON object
//   Mistral:            [TOOL_CALLS] [{"name": "f", "arguments": {...}}]
// A forced call (tool_choice "required" or a named function) is decoded under a JSON schema, so it
// always parses: `forcedToolSchema`.
import { randomBytes } from 'node:crypto';
import type { ResponseFormat, ToolCall, ToolChoice, ToolDef } from './types.ts';

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
export function randomId(prefix: string, n = 24): string {
  const b = randomBytes(n);
  let s = prefix;
  for (let i = 0; i < n; i++) s += ALNUM[b[i]! % ALNUM.length];
  return s;
}

export function toolsSystemPrompt(tools: ToolDef[], choice: ToolChoice | undefined): string {
  const lines = [
    'You may call the following functions. To call one, reply with',
    '<tool_call>{"name": <function name>, "arguments": <arguments object>}</tool_call>',
    'and nothing else. Available functions (JSON schema of their arguments):',
  ];
  for (const t of tools) {
    lines.push(JSON.stringify({ name: t.name, description: t.description ?? '', parameters: t.parameters }));
  }
  if (choice === 'required') lines.push('You must call one of these functions.');
  else if (choice && typeof choice === 'object') lines.push(`You must call the function "${choice.name}".`);
  return lines.join('\n');
}

/** Tools in the shape chat templates expect (`{type: "function", function: {...}}`). */
export function toolsForTemplate(tools: ToolDef[]): Array<Record<string, unknown>> {
  return tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description ?? '', parameters: t.parameters },
  }));
}

/**
 * JSON schema constraining the output to one call: `{"name": ..., "arguments": {...}}`.
 * `null` when the choice does not force a call.
 */
export function forcedToolSchema(tools: ToolDef[], choice: ToolChoice | undefined): ResponseFormat | null {
  if (!choice || choice === 'auto' || choice === 'none') return null;
  const pick = typeof choice === 'object' ? tools.filter((t) => t.name === choice.name) : tools;
  const variants = pick.map((t) => ({
    type: 'object',
    properties: { name: { const: t.name }, arguments: t.parameters && Object.keys(t.parameters).length ? t.parameters : { type: 'object' } },
    required: ['name', 'arguments'],
    additionalProperties: false,
  }));
  if (variants.length === 0) return null;
  const schema = variants.length === 1 ? variants[0]! : { anyOf: variants };
  return { type: 'json_schema', name: 'tool_call', schema: schema as Record<string, unknown>, strict: true };
}

interface RawCall { name?: unknown; arguments?: unknown; parameters?: unknown }

function toCall(raw: unknown, known: Set<string>, idPrefix: string): ToolCall | null {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return null;
  const r = raw as RawCall;
  if (typeof r.name !== 'string' || !known.has(r.name)) return null;
  let args = r.arguments ?? r.parameters ?? {};
  if (typeof args === 'string') {
    try {
      args = JSON.parse(args);
    } catch {
      return null;
    }
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) return null;
  return { id: randomId(idPrefix), name: r.name, arguments: JSON.stringify(args) };
}

function tryJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

/**
 * Splits a finished output into plain content and tool calls. Calls naming a function that was
 * not offered are not calls (the text stays content).
 */
export function parseToolCalls(text: string, tools: ToolDef[], idPrefix = 'call_'): { content: string; calls: ToolCall[] } {
  const known = new Set(tools.map((t) => t.name));
  const calls: ToolCall[] = [];
  // Hermes / Qwen: <tool_call>...</tool_call> (the closing tag may be cut by max_tokens)
  if (text.includes('<tool_call>')) {
    const re = /<tool_call>\s*([\s\S]*?)\s*(?:<\/tool_call>|$)/g;
    let m: RegExpExecArray | null;
    let content = text;
    while ((m = re.exec(text))) {
      const c = toCall(tryJson(m[1]!), known, idPrefix);
      if (c) {
        calls.push(c);
        content = content.replace(m[0], '');
      }
    }
    if (calls.length) return { content: content.trim(), calls };
  }
  let body = text.trim();
  let content = '';
  const tag = body.indexOf('<|python_tag|>');
  if (tag >= 0) {
    content = body.slice(0, tag).trim();
    body = body.slice(tag + '<|python_tag|>'.length).trim();
  }
  const mis = body.indexOf('[TOOL_CALLS]');
  if (mis >= 0) {
    content = body.slice(0, mis).trim();
    body = body.slice(mis + '[TOOL_CALLS]'.length).trim();
  }
  if (body.startsWith('{') || body.startsWith('[')) {
    let parsed = tryJson(body);
    // Llama emits several calls separated by ';' or newlines
    if (parsed === undefined && body.startsWith('{')) {
      const parts = body.split(/\}\s*[;\n]\s*\{/);
      if (parts.length > 1) parsed = tryJson('[' + parts.join('},{') + ']');
    }
    const list = Array.isArray(parsed) ? parsed : parsed !== undefined ? [parsed] : [];
    for (const raw of list) {
      const c = toCall(raw, known, idPrefix);
      if (!c) return { content: text, calls: [] };
      calls.push(c);
    }
    if (calls.length) return { content, calls };
  }
  return { content: text, calls: [] };
}

const MARKERS = ['<tool_call>', '<|python_tag|>', '[TOOL_CALLS]'];

/**
 * Streaming gate for tool-enabled requests: text that cannot be part of a tool call passes at
 * once; from the first possible start of a call (a marker, or JSON at the very start) the rest is
 * held back and decided on at `end()`.
 */
export class ToolCallGate {
  private buf = '';
  private started = false; // some non-whitespace text has been emitted
  private holding = false; // a call may be in progress: hold everything to the end
  /** returns the text that may be emitted now */
  push(text: string): string {
    if (this.holding) {
      this.buf += text;
      return '';
    }
    this.buf += text;
    if (!this.started) {
      const t = this.buf.trimStart();
      if (t === '') return '';
      if (t.startsWith('{') || t.startsWith('[')) {
        this.holding = true;
        return '';
      }
    }
    for (const m of MARKERS) {
      const i = this.buf.indexOf(m);
      if (i >= 0) {
        const out = this.buf.slice(0, i);
        this.buf = this.buf.slice(i);
        this.holding = true;
        if (out.trim()) this.started = true;
        return out;
      }
    }
    // hold a suffix that could be the beginning of a marker
    let keep = 0;
    for (const m of MARKERS) {
      for (let k = Math.min(m.length - 1, this.buf.length); k > keep; k--) {
        if (this.buf.endsWith(m.slice(0, k))) {
          keep = k;
          break;
        }
      }
    }
    const out = this.buf.slice(0, this.buf.length - keep);
    this.buf = this.buf.slice(this.buf.length - keep);
    if (out.trim()) this.started = true;
    return out;
  }
  /** the held text, to be parsed for calls (or emitted as content when it holds none) */
  end(): string {
    const b = this.buf;
    this.buf = '';
    return b;
  }
}
