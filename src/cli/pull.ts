// `loom pull <org/name> [--revision REV]`: downloads a model from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN)
// into the HF cache layout, with a progress bar; re-running resumes an interrupted download.
import cliProgress from 'cli-progress';
import { pullModel, resolveModel } from '../runtime/hub.ts';

function fmtBytes(n: number): string {
  if (n >= 1 << 30) return `${(n / (1 << 30)).toFixed(2)} GiB`;
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(0)} KiB`;
  return `${n} B`;
}

export async function main(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h') || argv.length === 0) {
    console.log('usage: loom pull <org/name> [--revision REV]\n\nDownloads into $HF_HOME/hub (or ~/.cache/huggingface/hub). Env: HF_ENDPOINT, HF_TOKEN.');
    return argv.length === 0 ? 1 : 0;
  }
  const repo = argv.find((a) => !a.startsWith('-'))!;
  const ri = argv.indexOf('--revision');
  const revision = ri >= 0 ? argv[ri + 1] : undefined;
  const known = resolveModel(repo);
  if (known.status === 'local' && !revision) console.log(`${repo} is already available at ${known.dir}; checking for missing files`);
  const tty = process.stderr.isTTY;
  const bar = new cliProgress.SingleBar(
    { format: '{bar} {percentage}% | {done} / {totalh} | {speed}/s | files {filesDone}/{files} | {file}', hideCursor: true, noTTYOutput: !tty, notTTYSchedule: 2000, barsize: 30 },
    cliProgress.Presets.shades_classic,
  );
  const ac = new AbortController();
  const onSig = (): void => ac.abort();
  process.once('SIGINT', onSig);
  const t0 = Date.now();
  let started = false;
  try {
    const dir = await pullModel(repo, {
      revision,
      signal: ac.signal,
      onProgress: (p) => {
        const payload = { done: fmtBytes(p.bytes), totalh: fmtBytes(p.total), speed: fmtBytes(p.bytes / Math.max(0.001, (Date.now() - t0) / 1000)), filesDone: p.filesDone, files: p.files, file: p.file };
        if (!started) { bar.start(Math.max(1, p.total), p.bytes, payload); started = true; }
        else bar.update(p.bytes, payload);
      },
    });
    if (started) bar.stop();
    console.log(`${repo} → ${dir}`);
    return 0;
  } catch (e) {
    if (started) bar.stop();
    console.error(`loom pull: ${(e as Error).message}`);
    return 1;
  } finally {
    process.off('SIGINT', onSig);
  }
}
