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
 * Consecutive sequences with the same prompt (DPO's chosen and rejected, GRPO's group) share it unless
 * `share` is false: the prompt but its last token is packed once, and each completion (after the prompt's
 * last token, whose row scores the completion's first token) continues it (DecoderBatch.seqParent), so the
 * prompt's rows are computed once for the group. A completion's last token is not packed (its row would score
 * nothing and no row attends to it). The log-probabilities are those of every token packed.
 * `tokens`: the sequences' tokens (prompt + completion each), what a step trains on whatever the packing.
 */
export function packScored(
  seqs: ScoredSequence[],
  share = true,
): { batch: DecoderBatch; rows: number[][]; tokens: number } {
  // segments: [shared prompt head (no labels)] or [ids, first position, parent segment, sequence index]
  const segs: Array<{ ids: number[]; pos0: number; parent: number; seq: number; promptLen: number }> = [];
  for (let i = 0; i < seqs.length; i++) {
    const s = seqs[i];
    const P = s.prompt.length;
    const same = (j: number) =>
      j < seqs.length && seqs[j].prompt.length === P && seqs[j].prompt.every((v, k) => v === s.prompt[k]);
    let n = 1;
    while (share && P >= 2 && same(i + n)) n++;
    if (n === 1) {
      segs.push({ ids: [...s.prompt, ...s.completion], pos0: 0, parent: -1, seq: i, promptLen: P });
      continue;
    }
    const parent = segs.length;
    segs.push({ ids: s.prompt.slice(0, P - 1), pos0: 0, parent: -1, seq: -1, promptLen: P - 1 });
    for (let j = i; j < i + n; j++)
      segs.push({ ids: [s.prompt[P - 1], ...seqs[j].completion], pos0: P - 1, parent, seq: j, promptLen: 1 });
    i += n - 1;
  }
  // rows packed per segment: a completion's last token labels nothing and no row attends to it (attention is
  // causal and nothing continues a completion), so it is left out
  const used = segs.map((g) => g.ids.length - (g.seq >= 0 && g.ids.length > g.promptLen ? 1 : 0));
  const R = used.reduce((a, n) => a + n, 0);
  const tokens = new Int32Array(R);
  const positions = new Int32Array(R);
  const labels = new Int32Array(R).fill(-100);
  const seqOff = new Int32Array(segs.length + 1);
  const seqParent = new Int32Array(segs.length);
  const rows: number[][] = seqs.map(() => []);
  let r = 0;
  segs.forEach((g, i) => {
    for (let t = 0; t < used[i]; t++) {
      tokens[r + t] = g.ids[t];
      positions[r + t] = g.pos0 + t;
      if (g.seq >= 0 && t + 1 < g.ids.length && t + 1 >= g.promptLen) {
        labels[r + t] = g.ids[t + 1];
        rows[g.seq].push(r + t);
      }
    }
    r += used[i];
    seqOff[i + 1] = r;
    seqParent[i] = g.parent;
  });
  const batch: DecoderBatch = { tokens, positions, labels, seqOff };
  if (segs.some((g) => g.parent >= 0)) batch.seqParent = seqParent;
  return { batch, rows, tokens: seqs.reduce((a, s) => a + s.prompt.length + s.completion.length, 0) };
}
