// Request limits of the encoder: every input the native code sizes memory or time from is bounded
// here (the one place these figures live; README "Encoder request limits" lists them).
//   - a text word longer than `wordChars` UTF-16 units is split into pieces of at most that length
//     (one word never becomes an unbounded run of sub-word tokens);
//   - long texts run in windows of at most `chunkWords` words (ExtractOptions, default 384) and
//     `windowTokens` sub-word tokens, so encoder cost is linear in the text's length;
//   - schema sizes are capped (names, descriptions, labels per task, tasks, prompt tokens), checked in
//     normalizeSchema / before any native call, with an error that names the limit and the path;
//   - `requestTokens` bounds the encoder tokens one request may run (every window's prompt + text).

export const ENCODER_LIMITS = {
  /** UTF-16 units of one text word; longer words are split into pieces of this length */
  wordChars: 128,
  /** sub-word tokens of text in one window (in addition to the schema prompt) */
  windowTokens: 1024,
  /** UTF-16 units of an entity label, field, choice, relation or classification task / label name */
  nameChars: 256,
  /** UTF-16 units of a description, a classification prompt or one side of an example */
  descriptionChars: 4096,
  /** entity labels; fields of one structure; choices of one field; labels of one classification */
  labels: 512,
  /** structures + relations + classifications of one schema; examples of one classification */
  tasks: 128,
  /** sub-word tokens of the schema prompt (segments and choice prefix), repeated in every window */
  promptTokens: 2048,
  /** encoder tokens of one request: the sum over every text window of its prompt and text tokens */
  requestTokens: 65_536,
  /** format 'gliner2' runs a text whole (no windows): its text tokens */
  wholeTextTokens: 8192,
} as const;

export type EncoderLimit = keyof typeof ENCODER_LIMITS;

/**
 * An input over one of ENCODER_LIMITS. `path` is a JSON pointer into the request ('/text',
 * '/text/3', '/schema/entities/0'), also at the start of the message; the service answers 422
 * validation_error with it (a RangeError, so the compatibility routes' parameter mapping applies).
 */
export class InputLimitError extends RangeError {
  override name = 'InputLimitError';
  constructor(
    message: string,
    readonly path: string,
    readonly limit: EncoderLimit,
  ) {
    super(`${path}: ${message}`);
  }
}

/** The InputLimitError for `what` (a phrase naming the input and its size) over ENCODER_LIMITS[limit]. */
export function overLimit(limit: EncoderLimit, path: string, what: string): InputLimitError {
  return new InputLimitError(`${what} (limit ${ENCODER_LIMITS[limit]}, ${limit})`, path, limit);
}
