// Memory sizes as the configuration writes them ("512MiB", "2 GiB", "1.5GB", plain bytes): a leaf with
// no native import, so the service reads LOOM_KV_MEMORY / LOOM_ADAPTER_MEMORY without loading the addon.
const UNITS: Record<string, number> = {
  '': 1, b: 1,
  k: 1e3, kb: 1e3, m: 1e6, mb: 1e6, g: 1e9, gb: 1e9, t: 1e12, tb: 1e12,
  kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3, tib: 1024 ** 4,
};

/** Parses "512MiB", "2 GiB", "1.5GB", "1048576" into bytes. Throws on anything else. */
export function parseMemorySize(s: string | number): number {
  if (typeof s === 'number') {
    if (!(s > 0) || !Number.isFinite(s)) {
      throw new RangeError(`memory size must be a positive number of bytes (got ${s})`);
    }
    return Math.floor(s);
  }
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$/.exec(s);
  const unit = m ? UNITS[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new RangeError(`invalid memory size "${s}" (examples: 512MiB, 2GiB, 1.5GB)`);
  const v = Math.floor(parseFloat(m[1]) * unit);
  if (!(v > 0)) throw new RangeError(`memory size must be positive (got "${s}")`);
  return v;
}
