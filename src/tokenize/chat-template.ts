// Chat templates (tokenizer_config.json `chat_template`, Jinja) rendered with @huggingface/jinja, plus the
// cache-breakpoint variant the prompt cache needs (char offsets where `cache_control`-marked blocks end).
import { Template } from '@huggingface/jinja';
import type { Tokenizer } from './tokenizer.ts';

export interface CacheControl {
  type: 'ephemeral';
  ttl?: string;
}

export type ContentBlock =
  | { type: 'text'; text: string; cache_control?: CacheControl | null }
  | { type: string; [k: string]: unknown; cache_control?: CacheControl | null };

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | 'developer';
  content: string | ContentBlock[] | null;
  name?: string;
  tool_calls?: unknown[];
  tool_call_id?: string;
  /** A breakpoint at the end of this whole message's content. */
  cache_control?: CacheControl | null;
}

export interface ChatTemplateSource {
  chatTemplate?: string;
  bosToken?: string;
  eosToken?: string;
}

export interface RenderOptions {
  addGenerationPrompt?: boolean;
  tools?: unknown[];
  /** Extra template variables (e.g. `enable_thinking`, `date_string`). */
  templateKwargs?: Record<string, unknown>;
}

export class ChatTemplateError extends Error {
  override name = 'ChatTemplateError';
}

/**
 * Used when the model has no chat_template (e.g. base/story models): plain role-prefixed turns, e.g.
 * "System: …\n\nUser: …\n\nAssistant:" — documented, predictable, and harmless for base models.
 */
export const FALLBACK_CHAT_TEMPLATE =
  "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n{% endfor %}" +
  "{% if add_generation_prompt %}Assistant:{% endif %}";

const templateCache = new Map<string, Template>();
function compile(src: string): Template {
  let t = templateCache.get(src);
  if (!t) {
    try {
      t = new Template(src);
    } catch (e) {
      throw new ChatTemplateError(`chat template does not parse: ${(e as Error).message}`);
    }
    if (templateCache.size > 64) templateCache.clear();
    templateCache.set(src, t);
  }
  return t;
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool', 'developer']);

function blockText(b: ContentBlock, where: string): string {
  if (b.type === 'text' && typeof (b as { text?: unknown }).text === 'string') return (b as { text: string }).text;
  throw new ChatTemplateError(`${where}: content block type "${b.type}" is not supported by a text-only model`);
}

/** Flattens content blocks (text parts joined with "\n"); `marks` receives sentinel insertions. */
function flatten(messages: ChatMessage[], sentinel: ((n: number) => string) | null, counter: { n: number }): Record<string, unknown>[] {
  if (!Array.isArray(messages) || messages.length === 0) throw new ChatTemplateError('messages must be a non-empty array');
  return messages.map((m, i) => {
    if (!m || typeof m !== 'object' || !ROLES.has(m.role)) throw new ChatTemplateError(`messages[${i}].role must be one of ${[...ROLES].join(', ')}`);
    let content: string;
    if (m.content == null) content = '';
    else if (typeof m.content === 'string') content = m.content;
    else if (Array.isArray(m.content)) {
      const parts: string[] = [];
      m.content.forEach((b, j) => {
        let s = blockText(b, `messages[${i}].content[${j}]`);
        if (sentinel && b.cache_control) s += sentinel(counter.n++);
        parts.push(s);
      });
      content = parts.join('\n');
    } else throw new ChatTemplateError(`messages[${i}].content must be a string or an array of content blocks`);
    if (sentinel && m.cache_control) content += sentinel(counter.n++);
    const out: Record<string, unknown> = { role: m.role, content };
    if (m.name !== undefined) out.name = m.name;
    if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls;
    if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
    return out;
  });
}

function sourceOf(tok: Tokenizer | ChatTemplateSource): ChatTemplateSource {
  return { chatTemplate: tok.chatTemplate, bosToken: tok.bosToken, eosToken: tok.eosToken };
}

function renderFlat(src: ChatTemplateSource, messages: Record<string, unknown>[], opts: RenderOptions): string {
  const tpl = compile(src.chatTemplate ?? FALLBACK_CHAT_TEMPLATE);
  try {
    return tpl.render({
      ...(opts.templateKwargs ?? {}),
      messages,
      tools: opts.tools,
      add_generation_prompt: opts.addGenerationPrompt ?? true,
      bos_token: src.bosToken ?? '',
      eos_token: src.eosToken ?? '',
    });
  } catch (e) {
    if (e instanceof ChatTemplateError) throw e;
    throw new ChatTemplateError(`chat template failed: ${(e as Error).message}`);
  }
}

/** Renders messages with the model's chat template (or FALLBACK_CHAT_TEMPLATE). addGenerationPrompt defaults to true. */
export function renderChat(tok: Tokenizer | ChatTemplateSource, messages: ChatMessage[], opts: RenderOptions = {}): string {
  return renderFlat(sourceOf(tok), flatten(messages, null, { n: 0 }), opts);
}

/**
 * Renders like renderChat and returns the char offsets (UTF-16, into `text`) where each `cache_control`-marked
 * block (or message with `cache_control`) ends, in order of appearance in the text. Works by rendering with
 * private-use sentinels appended to marked content, locating them, and removing them; a template that drops
 * or duplicates content yields only the offsets it kept (first occurrence each).
 */
export function renderChatWithBreakpoints(
  tok: Tokenizer | ChatTemplateSource,
  messages: ChatMessage[],
  opts: RenderOptions = {},
): { text: string; breakpoints: number[] } {
  const sent = (n: number): string => `\uE000${n}\uE001`;
  const counter = { n: 0 };
  const flat = flatten(messages, sent, counter);
  const raw = renderFlat(sourceOf(tok), flat, opts);
  if (counter.n === 0) return { text: raw, breakpoints: [] };
  const re = /\uE000(\d+)\uE001/g;
  let text = '';
  let last = 0;
  const seen = new Set<number>();
  const breakpoints: number[] = [];
  for (let m = re.exec(raw); m; m = re.exec(raw)) {
    text += raw.slice(last, m.index);
    last = m.index + m[0].length;
    const n = Number(m[1]);
    if (!seen.has(n)) {
      seen.add(n);
      breakpoints.push(text.length);
    }
  }
  text += raw.slice(last);
  return { text, breakpoints };
}

/**
 * Renders and tokenizes a chat. When the rendered text already starts with the BOS token (templates that
 * write `{{ bos_token }}`), the post-processor's specials are not added again.
 * `breakpointTokens` are token counts at each breakpoint (see Tokenizer.tokenCountAt: a token straddling the
 * boundary is excluded, so a cached prefix never extends past the marker).
 */
export function encodeChat(
  tok: Tokenizer,
  messages: ChatMessage[],
  opts: RenderOptions = {},
): { text: string; ids: number[]; breakpointTokens: number[] } {
  const { text, breakpoints } = renderChatWithBreakpoints(tok, messages, opts);
  const addSpecialTokens = !(tok.bosToken && text.startsWith(tok.bosToken));
  const ids = tok.encode(text, { addSpecialTokens });
  const breakpointTokens = breakpoints.map((off) => tok.tokenCountAt(text, off, { addSpecialTokens }, ids));
  return { text, ids, breakpointTokens };
}

/** encodeChat for every tokenizer.json and prompt length: encodes through Tokenizer.encodeAsync (the
 *  `tokenizers` package off the event loop for long prompts and for files the synchronous pipeline does not
 *  cover, see Tokenizer.syncEncode). Same result as encodeChat. */
export async function encodeChatAsync(
  tok: Tokenizer,
  messages: ChatMessage[],
  opts: RenderOptions = {},
): Promise<{ text: string; ids: number[]; breakpointTokens: number[] }> {
  const { text, breakpoints } = renderChatWithBreakpoints(tok, messages, opts);
  const addSpecialTokens = !(tok.bosToken && text.startsWith(tok.bosToken));
  const ids = await tok.encodeAsync(text, { addSpecialTokens });
  const breakpointTokens: number[] = [];
  for (const off of breakpoints) breakpointTokens.push(await tok.tokenCountAtAsync(text, off, { addSpecialTokens }, ids));
  return { text, ids, breakpointTokens };
}
