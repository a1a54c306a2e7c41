// Training metrics from the job's log lines (the live SSE stream carries them; no other endpoint
// reports per-step values): parsed into points, then into chart series. No DOM here: unit-tested.

export interface MetricPoint {
  step: number;
  values: Record<string, number>;
}

/**
 * The loss and reward metrics of a trainer's step line, e.g. sft `epoch 2 step 12/40: train_loss 0.53
 * val_loss 0.61`, dpo `step 8: loss 0.69, rewards/chosen 0.01, rewards/margin 0.02`, grpo `step 8:
 * loss 0.1, reward mean 0.4, reward std 0.2` (other lines, such as checkpoint notes, have no `step N:`).
 */
export function metricsOf(message: string): MetricPoint | null {
  const m = /\bstep (\d+)(?:\/\d+)?:(.*)$/.exec(message);
  if (!m) return null;
  const values: Record<string, number> = {};
  for (const v of m[2].matchAll(/([a-z][a-z_/]*(?: [a-z][a-z_/]*)?)[\s=:]+(-?\d+(?:\.\d+)?(?:e-?\d+)?)/gi)) {
    const name = v[1].toLowerCase();
    if (/loss|reward/.test(name)) values[name] = Number(v[2]);
  }
  return Object.keys(values).length ? { step: Number(m[1]), values } : null;
}

export function curves(points: MetricPoint[], pick: (name: string) => boolean) {
  const names = [...new Set(points.flatMap((p) => Object.keys(p.values)))].filter(pick).sort();
  const rows = points.filter((p) => names.some((n) => n in p.values));
  return {
    x: rows.map((p) => p.step),
    series: names.map((n) => ({ label: n, values: rows.map((p) => p.values[n] ?? null) })),
  };
}
