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

/** Renders a chat record and marks its assistant tokens (each assistant turn as the template renders it). */
export function chatToSequence(tok: Tokenizer, messages: ChatMessage[], maxLen: number): SftSequence | null {
  const full = renderChat(tok, messages, { addGenerationPrompt: false });
  const addSpecial = !(tok.bosToken && full.startsWith(tok.bosToken));
  const ids = tok.encode(full, { addSpecialTokens: addSpecial });
  const train = new Uint8Array(ids.length);
  let any = false;
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const before = renderChat(tok, messages.slice(0, i), { addGenerationPrompt: true });
    const upto = renderChat(tok, messages.slice(0, i + 1), { addGenerationPrompt: false });
    if (!full.startsWith(before) || !full.startsWith(upto)) return; // template not prefix-stable: skip this turn
    const a = tok.tokenCountAt(full, before.length, { addSpecialTokens: addSpecial }, ids);
    const b = tok.tokenCountAt(full, upto.length, { addSpecialTokens: addSpecial }, ids);
    for (let t = a; t < b; t++) ((train[t] = 1), (any = true));
  });
  if (!any) return null;
  const n = Math.min(ids.length, maxLen);
  return { ids: ids.slice(0, n), train: train.slice(0, n) };
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
