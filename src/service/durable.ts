// Crash-consistent files: after a kill -9 (or a power loss) at any point, a path holds either its
// old content or the whole new content, never a part. Write a temporary sibling, fsync it, rename
// it over the target, fsync the directory (so the rename itself is on disk). Leftover temporaries
// end in `.tmp` (TMP_SUFFIX); start-up recovery may delete them.
import { open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';

export const TMP_SUFFIX = '.tmp';

/** a fresh temporary name next to `path` (unique per call, so concurrent writers never share one) */
export function tmpSibling(path: string): string {
  return join(dirname(path), `.${basename(path)}.${randomBytes(6).toString('hex')}${TMP_SUFFIX}`);
}

/** make a directory entry change (create, rename, remove) in `dir` durable */
export async function fsyncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try { await fh.sync(); } finally { await fh.close(); }
}

/** write `data` to `path` atomically and durably (async: a large file never blocks the event loop) */
export async function writeFileDurable(path: string, data: Buffer | string): Promise<void> {
  const tmp = tmpSibling(path);
  try {
    const fh = await open(tmp, 'w');
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  await fsyncDir(dirname(path));
}

/** move a completed temporary directory (its files already synced) into place, durably */
export async function renameDurable(from: string, to: string): Promise<void> {
  await rename(from, to);
  await fsyncDir(dirname(to));
}
