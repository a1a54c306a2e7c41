// What the judge reads. Every prompt is a system message (the task and the answer format) and one
// user message: the rubric, then the material.
//   encoder inference  the input text, the schema and the model's output JSON
//   decoder inference  the conversation (or raw prompt) and the model's reply
//   reward item        the prompt, the reference answer and the completion (llm_as_judge reward)
// Each piece is cut to MAX_PIECE_CHARS (a marker says how much was left out) so a prompt stays
// within a small judge's context; a prompt still too long fails like any over-long inference.
import type { InferenceRecord } from '../../store/index.ts';
import type { GenerateMessage } from '../runtime.ts';

export const MAX_PIECE_CHARS = 4000;

const cut = (s: string): string =>
  s.length <= MAX_PIECE_CHARS
    ? s
    : `${s.slice(0, MAX_PIECE_CHARS)}… [${s.length - MAX_PIECE_CHARS} more characters left out]`;

const json = (v: unknown): string => JSON.stringify(v ?? null, null, 1);

export function systemPrompt(scoreScale: number): string {
  return (
    "You are an impartial judge of an AI model's work. Read the rubric, then the material, and grade the " +
    `work against the rubric only. Answer with one JSON object: "verdict" is "pass" when the work meets the rubric, ` +
    `"fail" when it does not, "uncertain" when the material does not let you decide; "score" is an integer from 0 ` +
    `(worst) to ${scoreScale} (best); "reasoning" says briefly why.`
  );
}

const textOf = (c: GenerateMessage['content'] | unknown): string => {
  if (typeof c === 'string') return c;
  if (Array.isArray(c))
    return c.map((b) => (b && typeof b === 'object' && 'text' in b ? String(b.text) : json(b))).join('');
  return json(c);
};

/** The reply text of a decoder record's output (native `content`, compat `choices[0].text`). */
export function replyText(output: unknown): string {
  if (typeof output === 'string') return output;
  const o = output as { content?: unknown; choices?: { text?: unknown; tool_calls?: unknown }[] } | null;
  if (o && typeof o.content === 'string') return o.content;
  const c = o?.choices?.[0];
  if (c) return typeof c.text === 'string' && c.text ? c.text : json(c.tool_calls ?? c);
  return json(output);
}

function conversation(input: InferenceRecord['input']): string {
  if (input?.messages) {
    return (input.messages as { role?: string; content?: unknown }[])
      .map((m) => `[${m.role ?? 'user'}]\n${cut(textOf(m.content))}`)
      .join('\n\n');
  }
  return `[prompt]\n${cut(String(input?.prompt ?? ''))}`;
}

/** Why an inference cannot be judged, or null when it can. */
export function unjudgeable(r: InferenceRecord): string | null {
  if (r.status !== 'success') return 'the inference failed: there is no output to judge';
  if (r.task === 'embed') return 'embeddings are not judged';
  if (!r.stored_content || r.input === null)
    return 'the inference was made with store: false: its content was not kept';
  return null;
}

/** The judge's messages for a stored inference (call `unjudgeable` first). */
export function inferenceMessages(r: InferenceRecord, rubric: string, scoreScale: number): GenerateMessage[] {
  let material: string;
  if (r.type === 'encoder') {
    const text = Array.isArray(r.input?.text) ? r.input.text.join('\n---\n') : String(r.input?.text ?? '');
    material =
      `The model extracted structured information from a text.\n\nInput text:\n${cut(text)}\n\n` +
      `Schema (what to extract):\n${cut(json(r.schema))}\n\nModel output (JSON):\n${cut(json(r.output))}`;
  } else {
    material =
      `The model replied to a conversation.\n\nConversation:\n${conversation(r.input)}\n\n` +
      `Model reply:\n${cut(replyText(r.output))}`;
  }
  return [
    { role: 'system', content: systemPrompt(scoreScale) },
    { role: 'user', content: `Rubric:\n${cut(rubric)}\n\n${material}` },
  ];
}

/** The judge's messages for one llm_as_judge reward item. */
export function rewardMessages(
  item: { prompt: string; completion: string; answer: string },
  rubric: string,
  scoreScale: number,
): GenerateMessage[] {
  return [
    { role: 'system', content: systemPrompt(scoreScale) },
    {
      role: 'user',
      content:
        `Rubric:\n${cut(rubric)}\n\nThe model answered a prompt; a reference answer is given.\n\n` +
        `Prompt:\n${cut(item.prompt)}\n\nReference answer:\n${cut(item.answer)}\n\n` +
        `Model answer:\n${cut(item.completion)}`,
    },
  ];
}
