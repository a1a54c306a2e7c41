// Stop strings for streaming generation. Text is pushed as it is detokenized; the matcher emits what can
// no longer be part of a stop string and holds back any suffix that is a prefix of one. When a stop string
// completes, everything before it is emitted and the stop string itself (and anything after) never is.

export interface StopPush {
  /** Text safe to send to the client now. */
  emit: string;
  /** A stop string matched: generation should end (finish_reason "stop"). */
  stopped: boolean;
  /** The stop string that matched (when stopped). */
  match?: string;
}

export class StopMatcher {
  private readonly stops: string[];
  private readonly maxLen: number;
  private held = '';
  private done = false;

  constructor(stops: readonly string[]) {
    this.stops = [...new Set(stops.filter((s) => typeof s === 'string' && s.length > 0))];
    this.maxLen = this.stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  get stopped(): boolean {
    return this.done;
  }

  push(delta: string): StopPush {
    if (this.done) return { emit: '', stopped: true };
    if (this.stops.length === 0) return { emit: delta, stopped: false };
    const buf = this.held + delta;
    // earliest complete match (ties: the longest stop string at that position)
    let at = -1, match: string | undefined;
    for (const s of this.stops) {
      const i = buf.indexOf(s);
      if (i >= 0 && (at < 0 || i < at || (i === at && s.length > match!.length))) {
        at = i;
        match = s;
      }
    }
    if (at >= 0) {
      this.done = true;
      this.held = '';
      return { emit: buf.slice(0, at), stopped: true, match };
    }
    // hold back the longest suffix of buf that is a proper prefix of some stop string
    let keep = 0;
    const maxK = Math.min(buf.length, this.maxLen - 1);
    for (let k = maxK; k > 0; k--) {
      const suf = buf.slice(buf.length - k);
      if (this.stops.some((s) => s.startsWith(suf))) {
        keep = k;
        break;
      }
    }
    // never split a UTF-16 surrogate pair between emit and held
    let cut = buf.length - keep;
    if (cut > 0 && cut < buf.length) {
      const c = buf.charCodeAt(cut - 1);
      if (c >= 0xd800 && c <= 0xdbff) cut--;
    }
    this.held = buf.slice(cut);
    return { emit: buf.slice(0, cut), stopped: false };
  }

  /** End of generation without a stop: releases the held-back text. */
  flush(): string {
    if (this.done) return '';
    const h = this.held;
    this.held = '';
    return h;
  }
}
