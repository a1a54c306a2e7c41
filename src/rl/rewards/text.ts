// Text rewards: pure functions of (completion, answer) → reward in [0, 1].
//
//   exact_match         1 when the two are equal after trimming both ends and collapsing every run of
//                       whitespace to one space; case and punctuation count ("Paris." ≠ "paris").
//   contains_substring  1 when the completion contains the answer, case-insensitively (Unicode
//                       lower case of both); the answer is trimmed; an empty answer matches nothing.
//   choice_match        1 when the letter chosen in the completion (A–J) equals the answer's letter;
//                       see `chosenLetter` for how the letter is found.
//   regex_match         1 when the answer, a pattern, matches anywhere in the completion (Python
//                       `re.search` semantics; anchor with ^…$ to require the whole completion).
//                       Case-sensitive unless the pattern starts with (?i). Patterns run on V8's
//                       linear-time engine through the encoder validators' compiler
//                       (src/models/encoder/validators.ts), so no pattern can backtrack
//                       exponentially; one it cannot run (backreferences, lookaround) is an error.
import { compileValidator } from '../../models/encoder/validators.ts';

const squash = (s: string) => s.trim().replace(/\s+/g, ' ');

export function exactMatch(completion: string, answer: string): number {
  return squash(completion) === squash(answer) ? 1 : 0;
}

export function containsSubstring(completion: string, answer: string): number {
  const a = answer.trim().toLowerCase();
  return a !== '' && completion.toLowerCase().includes(a) ? 1 : 0;
}

const LETTERS = 'A-J';
/** "the answer is (B)", "Answer: b", "answer - C" (the last such phrase wins) */
const ANSWER_PHRASE = new RegExp(`answer\\s*(?:is|:|-|=)?\\s*[:\\-]?\\s*\\(?([${LETTERS}])(?![a-z])`, 'gi');
/** the completion is the letter or opens with it: "B", "(B)", "B) Paris", "B. Paris", "B: Paris" */
const LEADING = new RegExp(`^\\(?([${LETTERS}])(?:\\)|[.:](?:\\s|$)|$)`);
/** a parenthesised letter anywhere: "(C)" */
const PAREN = new RegExp(`\\(([${LETTERS}])\\)`, 'g');
/** a standalone capital letter; "A" or "I" before a lower-case word is the article or pronoun */
const STANDALONE = new RegExp(`(?<![\\w'])([B-HJ]|[AI](?!\\s+[a-z]))(?![\\w'])`, 'g');

const last = (re: RegExp, s: string): string | null => {
  let m: RegExpExecArray | null;
  let out: string | null = null;
  re.lastIndex = 0;
  while ((m = re.exec(s)) !== null) out = m[1];
  return out;
};

/**
 * The letter a completion chooses, in this order: the last "answer is X" / "Answer: X" phrase
 * (any case); a letter opening the completion ("B", "(B)", "B) …", "B. …"); the last "(X)"; the
 * last standalone capital letter A–J ("A" and "I" before a lower-case word excluded). Null
 * when none is found. The answer's own letter is found the same way ("B", "(B)", "B) Paris").
 */
export function chosenLetter(text: string): string | null {
  const t = text.trim();
  const phrase = last(ANSWER_PHRASE, t);
  if (phrase) return phrase.toUpperCase();
  const lead = LEADING.exec(t);
  if (lead) return lead[1];
  return last(PAREN, t) ?? last(STANDALONE, t);
}

export function choiceMatch(completion: string, answer: string): number {
  const want = chosenLetter(answer);
  if (!want) throw new Error(`choice_match: the answer ${JSON.stringify(answer.slice(0, 40))} names no letter A-J`);
  return chosenLetter(completion) === want ? 1 : 0;
}

export function regexMatch(completion: string, answer: string): number {
  let re: RegExp;
  try {
    re = compileValidator({ pattern: answer, mode: 'partial', exclude: false, ignoreCase: false }, 'regex_match');
  } catch (e) {
    throw new Error((e as Error).message);
  }
  re.lastIndex = 0;
  return re.test(completion) ? 1 : 0;
}
