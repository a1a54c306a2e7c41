// Word splitting exactly as the GLiNER2 reference (spec §3.4): Python `re` with VERBOSE|IGNORECASE,
// leftmost alternative wins. Python's `\w` on str is [\p{L}\p{N}_] (combining marks are NOT word
// characters), so the JS pattern spells it out with the `u` flag (JS `\w` is ASCII-only).
// Offsets are UTF-16 code-unit indices (what JavaScript strings use), half-open.
// Two bounds the reference does not have keep the cost linear in the text's length (ENCODER_LIMITS):
// the e-mail alternative's local part is at most 64 characters and its domain at most 255 (RFC 5321;
// unbounded, a text such as "a.a.a.…" made the regexp rescan the rest of the text from every
// position), and a word longer than wordChars is split into pieces of at most that length.
import { ENCODER_LIMITS } from './limits.ts';

const WORD_RE =
  /(?:https?:\/\/[^\s]+|www\.[^\s]+)|[a-z0-9._%+-]{1,64}@[a-z0-9.-]{1,255}\.[a-z]{2,}|@[a-z0-9_]+|[\p{L}\p{N}_]+(?:[-_][\p{L}\p{N}_]+)*|\S/giu;

export interface Words {
  /** Lower-cased words (Python str.lower() ≡ String.prototype.toLowerCase for these purposes). */
  tokens: string[];
  /** UTF-16 start / end (exclusive) of each word in the text. */
  start: number[];
  end: number[];
}

/**
 * Words of `text` with their offsets. A match longer than `maxChars` becomes consecutive pieces of
 * at most `maxChars` UTF-16 units (never splitting a surrogate pair); a piece's end depends only on
 * where it starts, so re-splitting a window that begins at a piece boundary gives the same pieces.
 * With `maxWords`, stops after that many (a caller bounding its work need not split the rest).
 */
export function splitWords(
  text: string,
  lowercase = true,
  maxChars: number = ENCODER_LIMITS.wordChars,
  maxWords = Infinity,
): Words {
  const tokens: string[] = [];
  const start: number[] = [];
  const end: number[] = [];
  const push = (s: number, e: number) => {
    const w = text.slice(s, e);
    tokens.push(lowercase ? w.toLowerCase() : w);
    start.push(s);
    end.push(e);
  };
  WORD_RE.lastIndex = 0;
  for (let m = WORD_RE.exec(text); m !== null && tokens.length < maxWords; m = WORD_RE.exec(text)) {
    const e = m.index + m[0].length;
    for (let s = m.index; s < e && tokens.length < maxWords; ) {
      let pe = Math.min(e, s + maxChars);
      const c = text.charCodeAt(pe - 1);
      if (pe < e && pe - s > 1 && c >= 0xd800 && c <= 0xdbff) pe--; // keep a surrogate pair together
      push(s, pe);
      s = pe;
    }
  }
  return { tokens, start, end };
}

/** The reference appends "." to texts that do not end with . ! or ? (empty text ⇒ "."). */
export function preprocessText(text: string): string {
  return /[.!?]$/.test(text) ? text : text + '.';
}

/** Maps UTF-16 offsets of `text` to Unicode code-point offsets (Python string indices). */
export function codePointOffsets(text: string): (utf16: number) => number {
  let astral = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      astral = true;
      break;
    }
  }
  if (!astral) return (u) => u;
  const map = new Int32Array(text.length + 1);
  let cp = 0;
  for (let i = 0; i < text.length; i++) {
    map[i] = cp;
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        map[i + 1] = cp;
        i++;
      }
    }
    cp++;
  }
  map[text.length] = cp;
  return (u) => map[u];
}
