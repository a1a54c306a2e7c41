// Prompt and completion tokens of preference / RL rows: a chat prompt (messages) is rendered with the
// model's chat template and its generation prompt; a plain string prompt is used as raw text (as TRL
// treats "standard" prompts), with the tokenizer's BOS. Completions are raw text followed by EOS.
import { renderChat, type ChatMessage } from '../../tokenize/chat-template.ts';
import type { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { ChatMessageRecord } from '../data/formats.ts';
import type { DecoderBatch } from '../native.ts';

export function promptIds(tok: Tokenizer, prompt: string | ChatMessageRecord[]): number[] {
  const text =
    typeof prompt === 'string' ? prompt : renderChat(tok, prompt as ChatMessage[], { addGenerationPrompt: true });
  const addSpecial = !(tok.bosToken && text.startsWith(tok.bosToken));
  return tok.encode(text, { addSpecialTokens: addSpecial });
}

/** The prompt as plain text (reward functions and the judge see it). */
export function promptText(prompt: string | ChatMessageRecord[]): string {
  return typeof prompt === 'string' ? prompt : prompt.map((m) => `${m.role}: ${m.content}`).join('\n');
}

export function completionIds(tok: Tokenizer, text: string): number[] {
  const ids = tok.encode(text, { addSpecialTokens: false });
  if (tok.eosIds.length) ids.push(tok.eosIds[0]);
  return ids;
}

/** A prompt followed by a completion; only completion tokens are scored. */
export interface ScoredSequence {
  prompt: number[];
  completion: number[];
}

/**
 * Packs sequences into one batch; labels[t] = ids[t+1] where token t+1 is a completion token (so row t
 * scores completion token t+1). `rows[i]` lists, per sequence, the rows of its completion tokens in order.
 */
export function packScored(seqs: ScoredSequence[]): { batch: DecoderBatch; rows: number[][] } {
  const R = seqs.reduce((a, s) => a + s.prompt.length + s.completion.length, 0);
  const tokens = new Int32Array(R);
  const positions = new Int32Array(R);
  const labels = new Int32Array(R).fill(-100);
  const seqOff = new Int32Array(seqs.length + 1);
  const rows: number[][] = [];
  let r = 0;
  seqs.forEach((s, i) => {
    const ids = [...s.prompt, ...s.completion];
    const mine: number[] = [];
    for (let t = 0; t < ids.length; t++) {
      tokens[r + t] = ids[t];
      positions[r + t] = t;
      if (t + 1 < ids.length && t + 1 >= s.prompt.length) {
        labels[r + t] = ids[t + 1];
        mine.push(r + t);
      }
    }
    rows.push(mine);
    r += ids.length;
    seqOff[i + 1] = r;
  });
  return { batch: { tokens, positions, labels, seqOff }, rows };
}
