// The LoRA shape (rank, alpha, target modules) a continued decoder adapter keeps: one check shared by
// the trainer and the training-jobs service (a leaf: no imports, so the service loads no native code).

/** Why LoRA options conflict with the adapter being continued (null: they agree or are absent). */
export function adapterConflict(
  o: { lora_r?: number | null; lora_alpha?: number | null; lora_target_modules?: string[] | null },
  ad: { r: number; alpha: number; targetModules: string[] },
): string | null {
  if (o.lora_r != null && o.lora_r !== ad.r) return `lora_r ${o.lora_r} differs from the adapter's rank ${ad.r}`;
  if (o.lora_alpha != null && o.lora_alpha !== ad.alpha)
    return `lora_alpha ${o.lora_alpha} differs from the adapter's ${ad.alpha}`;
  const same = (a: string[], b: string[]) => a.length === b.length && a.every((x) => b.includes(x));
  if (o.lora_target_modules != null && !same(o.lora_target_modules, ad.targetModules))
    return (
      `target modules ${o.lora_target_modules.join(', ')} ` + `differ from the adapter's ${ad.targetModules.join(', ')}`
    );
  return null;
}
