// rougeL_match: the ROUGE-L F-measure of the completion (prediction) against the answer (target),
// as Google's `rouge-score` package computes it with RougeScorer(['rougeL'], use_stemmer=False):
// tokens are the text lower-cased, every run of characters outside [a-z0-9] a separator (so
// accents, non-Latin scripts and punctuation are dropped); P = LCS / |prediction tokens|,
// R = LCS / |target tokens|, F = 2PR / (P + R); 0 when either side has no token.
// Checked against the package's values in test/rl/rewards.test.ts (fixture test/fixtures/rouge/).

/** rouge-score's DefaultTokenizer without stemming */
export function rougeTokens(text: string): string[] {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, ' ').split(/\s+/).filter((t) => /^[a-z0-9]+$/.test(t));
}

/** length of the longest common subsequence of two token lists (one rolling row, O(|a|·|b|) time) */
export function lcsLength(a: readonly string[], b: readonly string[]): number {
  const row = new Uint32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    let diag = 0; // row[j-1] of the previous i
    for (let j = 1; j <= b.length; j++) {
      const up = row[j];
      row[j] = a[i - 1] === b[j - 1] ? diag + 1 : Math.max(up, row[j - 1]);
      diag = up;
    }
  }
  return row[b.length];
}

export function rougeL(prediction: string, target: string): { precision: number; recall: number; fmeasure: number } {
  const p = rougeTokens(prediction), t = rougeTokens(target);
  if (!p.length || !t.length) return { precision: 0, recall: 0, fmeasure: 0 };
  const lcs = lcsLength(t, p);
  const precision = lcs / p.length, recall = lcs / t.length;
  const fmeasure = precision + recall > 0 ? (2 * precision * recall) / (precision + recall) : 0;
  return { precision, recall, fmeasure };
}

export function rougeLMatch(completion: string, answer: string): number {
  return rougeL(completion, answer).fmeasure;
}
