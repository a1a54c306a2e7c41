// Supervised fine-tuning of a decoder on chat records: the chat template renders each conversation,
// the loss is the mean cross-entropy of the assistant tokens (the graph's fused SFT step), sequences are
// packed per micro-batch (attention never crosses sequences).
import { renderChat, type ChatMessage } from '../../tokenize/chat-template.ts';
import type { Tokenizer } from '../../tokenize/tokenizer.ts';
import type { ChatRecord, DataRecord } from '../data/formats.ts';
import { TrainingConfigError } from '../common.ts';
import type { DecoderBatch } from '../native.ts';
import type { AlgorithmRun, DecoderAlgorithm } from './types.ts';

export interface SftSequence {
  ids: number[];
  /** per position: 1 if the token is an assistant token (trained on) */
  train: Uint8Array;
}

/**
 * Renders a chat record and marks its assistant tokens (each assistant turn as the template renders it).
 * The text before each assistant turn and the turn itself are tokenized apart, as the server tokenizes a
 * prompt (the conversation up to the generation prompt) and then generates: tokenizing the whole rendered
 * text would let the template's last prompt characters merge with the reply's first (tinystories' template
 * ends the prompt with "Assistant:", and ": The" is one token there), so the model would be trained after a
 * token the served prompt never ends with.
 */
export function chatToSequence(tok: Tokenizer, messages: ChatMessage[], maxLen: number): SftSequence | null {
  const full = renderChat(tok, messages, { addGenerationPrompt: false });
  const addSpecial = !(tok.bosToken && full.startsWith(tok.bosToken));
  // character ranges of the assistant turns in `full`
  const turns: Array<[number, number]> = [];
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const before = renderChat(tok, messages.slice(0, i), { addGenerationPrompt: true });
    const upto = renderChat(tok, messages.slice(0, i + 1), { addGenerationPrompt: false });
    if (!full.startsWith(before) || !full.startsWith(upto) || upto.length <= before.length) return; // not prefix-stable
    const last = turns[turns.length - 1];
    if (!last || before.length >= last[1]) turns.push([before.length, upto.length]);
  });
  if (!turns.length) return null;
  const ids: number[] = [];
  const marks: number[] = [];
  const add = (text: string, trained: number) => {
    if (!text) return;
    for (const id of tok.encode(text, { addSpecialTokens: ids.length === 0 && addSpecial })) {
      ids.push(id);
      marks.push(trained);
    }
  };
  let at = 0;
  for (const [from, to] of turns) {
    add(full.slice(at, from), 0);
    add(full.slice(from, to), 1);
    at = to;
  }
  add(full.slice(at), 0);
  const n = Math.min(ids.length, maxLen);
  const train = Uint8Array.from(marks.slice(0, n));
  if (!train.some((x) => x === 1)) return null;
  return { ids: ids.slice(0, n), train };
}

/** Packs sequences into one micro-batch; labels[t] = ids[t+1] when token t+1 is trained on. */
export function packSequences(seqs: SftSequence[]): DecoderBatch {
  const R = seqs.reduce((a, s) => a + s.ids.length, 0);
  const tokens = new Int32Array(R);
  const positions = new Int32Array(R);
  const labels = new Int32Array(R).fill(-100);
  const seqOff = new Int32Array(seqs.length + 1);
  let r = 0;
  seqs.forEach((s, i) => {
    for (let t = 0; t < s.ids.length; t++) {
      tokens[r + t] = s.ids[t];
      positions[r + t] = t;
      if (t + 1 < s.ids.length && s.train[t + 1]) labels[r + t] = s.ids[t + 1];
    }
    r += s.ids.length;
    seqOff[i + 1] = r;
  });
  return { tokens, positions, labels, seqOff };
}

export const sft: DecoderAlgorithm = {
  name: 'sft',
  recordKinds: ['chat'],
  async prepare(run, trainRecs, valRecs): Promise<AlgorithmRun<SftSequence>> {
    const toSeqs = (recs: DataRecord[]) =>
      recs
        .filter((x): x is ChatRecord => x.kind === 'chat')
        .map((x) => chatToSequence(run.tok, x.messages as ChatMessage[], run.maxLen))
        .filter((s): s is SftSequence => s !== null);
    const trainS = toSeqs(trainRecs);
    const valS = toSeqs(valRecs);
    if (!trainS.length) throw new TrainingConfigError('no training conversation has an assistant turn');
    const g = run.graph;
    return {
      items: trainS,
      describe: `${trainS.length} training / ${valS.length} validation conversations`,
      async microStep(seqs, o) {
        const res = await g.step(packSequences(seqs), o);
        return { loss: res.loss, weight: 1, tokens: seqs.reduce((n, x) => n + x.ids.length, 0) };
      },
      async evaluate() {
        if (!valS.length) return null;
        let s = 0;
        let n = 0;
        for (let i = 0; i < valS.length; i += run.batchSize) {
          const res = await g.step(packSequences(valS.slice(i, i + run.batchSize)), { backward: false });
          s += res.loss * res.counted;
          n += res.counted;
        }
        return n ? s / n : null;
      },
    };
  },
};
