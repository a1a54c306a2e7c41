// A .tar.gz of a directory (POSIX ustar, regular files and directories), for weight downloads.
// Written with node:zlib; no archive dependency for a format this small.
import { createWriteStream, readdirSync, readFileSync, renameSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { createGzip } from 'node:zlib';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

function header(name: string, size: number, mtime: number, type: '0' | '5'): Buffer {
  const h = Buffer.alloc(512);
  let prefix = '';
  let n = name;
  if (Buffer.byteLength(n) > 100) {
    // ustar: split into a prefix (<= 155 bytes) and a name (<= 100 bytes) at a '/'
    const i = n.slice(0, 155).lastIndexOf('/');
    if (i <= 0 || Buffer.byteLength(n.slice(i + 1)) > 100) throw new Error(`path too long for a tar archive: ${name}`);
    prefix = n.slice(0, i);
    n = n.slice(i + 1);
  }
  h.write(n, 0, 100, 'utf8');
  h.write(type === '5' ? '0000755\0' : '0000644\0', 100, 8, 'ascii');
  h.write('0000000\0', 108, 8, 'ascii');
  h.write('0000000\0', 116, 8, 'ascii');
  h.write(size.toString(8).padStart(11, '0') + '\0', 124, 12, 'ascii');
  h.write(Math.floor(mtime / 1000).toString(8).padStart(11, '0') + '\0', 136, 12, 'ascii');
  h.write('        ', 148, 8, 'ascii');
  h.write(type, 156, 1, 'ascii');
  h.write('ustar\0' + '00', 257, 8, 'ascii');
  h.write(prefix, 345, 155, 'utf8');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return h;
}

function* entries(root: string, dir: string, top: string, keep: (rel: string) => boolean): Generator<Buffer> {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    const st = statSync(p);
    const relPath = relative(root, p).split('\\').join('/');
    if (!st.isDirectory() && !keep(relPath)) continue;
    const rel = `${top}/${relPath}`;
    if (st.isDirectory()) {
      yield header(rel + '/', 0, st.mtimeMs, '5');
      yield* entries(root, p, top, keep);
    } else if (st.isFile()) {
      yield header(rel, st.size, st.mtimeMs, '0');
      yield readFileSync(p);
      const pad = (512 - (st.size % 512)) % 512;
      if (pad) yield Buffer.alloc(pad);
    }
  }
}

/** `dir` (the files `keep` accepts) packed under the top-level folder `top` into `out` (written atomically). */
export async function writeTarGz(dir: string, out: string, top: string, keep: (rel: string) => boolean = () => true): Promise<void> {
  const safeTop = top.replace(/[^A-Za-z0-9._-]/g, '_') || 'model';
  function* all() { yield* entries(dir, dir, safeTop, keep); yield Buffer.alloc(1024); }
  await pipeline(Readable.from(all()), createGzip(), createWriteStream(out + '.tmp'));
  renameSync(out + '.tmp', out);
}
