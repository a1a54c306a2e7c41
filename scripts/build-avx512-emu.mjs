#!/usr/bin/env node
// Builds build-emu/loom.node: the addon with its AVX-512 sources compiled against SIMDe's portable AVX-512
// (Debian package libsimde-dev, header-only) instead of the hardware instructions, and LOOM_EMULATE_AVX512
// so the CPU reports AVX-512. On a machine without AVX-512 this runs every AVX-512 code path (GEMM 12x32,
// vdpbf16ps bf16 compute, ops, attention) so their logic is tested before they meet real hardware:
//   node scripts/build-avx512-emu.mjs && LOOM_ADDON=build-emu/loom.node npx tap test/native
// (numerics are SIMDe's, not the silicon's: this checks indexing, tails, masks and packing, not speed).
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const out = join(root, 'build-emu');
const objDir = join(out, 'obj');
mkdirSync(objDir, { recursive: true });

const simde = ['/usr/include/simde/x86/avx512.h', '/usr/local/include/simde/x86/avx512.h'].find(existsSync);
if (!simde) {
  console.error('loom: SIMDe headers not found; install them with `apt-get install libsimde-dev`.');
  process.exit(2);
}
const nodeInc = [join(dirname(process.execPath), '../include/node'), '/usr/include/node'].find((d) => existsSync(join(d, 'node_api.h')));
if (!nodeInc) { console.error('loom: Node headers (node_api.h) not found.'); process.exit(2); }

const sources = (kind) => execFileSync(process.execPath, [join(root, 'scripts/native-sources.cjs'), kind], { encoding: 'utf8' }).split(' ').filter(Boolean);
const common = ['-O2', '-std=c++17', '-fPIC', '-fno-math-errno', '-fexceptions', '-w', '-pthread',
  '-DNAPI_VERSION=9', '-DNAPI_CPP_EXCEPTIONS', '-DLOOM_EMULATE_AVX512',
  `-I${require('node-addon-api').include_dir}`, `-I${nodeInc}`, `-I${join(root, 'native/include')}`];
const avx2 = ['-mavx2', '-mfma', '-mf16c'];
const real512 = ['-mavx512f', '-mavx512bw', '-mavx512vl', '-mavx512dq', '-mavx512bf16', '-mavx512vnni', ...avx2];
const units = [
  ...sources('portable').map((s) => [s, []]),
  ...sources('avx2').map((s) => [s, avx2]),
  // The peak-FLOP loops are zmm inline asm (never called on an emulated build); everything else goes through SIMDe.
  ...sources('avx512').map((s) => [s, s.includes('bench/') ? real512 : [`-I${join(root, 'native/emu/avx512')}`, ...avx2]]),
];

// Rebuild an object when its source or any header under native/ is newer.
function newest(dir) {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) t = Math.max(t, newest(p));
    else if (/\.(h|hpp)$/.test(e.name)) t = Math.max(t, statSync(p).mtimeMs);
  }
  return t;
}
const headersT = newest(join(root, 'native'));
const objs = [];
const todo = [];
for (const [src, flags] of units) {
  const obj = join(objDir, src.replace(/[/.]/g, '_') + '.o');
  objs.push(obj);
  const t = existsSync(obj) ? statSync(obj).mtimeMs : 0;
  if (t < Math.max(headersT, statSync(join(root, src)).mtimeMs)) todo.push([src, flags, obj]);
}

function compile([src, flags, obj]) {
  return new Promise((resolve, reject) => {
    const p = spawn('g++', [...common, ...flags, '-c', src, '-o', obj], { cwd: root, stdio: 'inherit' });
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`g++ failed on ${src}`))));
  });
}
const jobs = Math.max(1, os.cpus().length);
let next = 0;
let done = 0;
async function worker() {
  while (next < todo.length) {
    const u = todo[next++];
    await compile(u);
    done++;
    process.stderr.write(`\r[emu build] ${done}/${todo.length} ${u[0]}`.padEnd(100));
  }
}
try {
  await Promise.all(Array.from({ length: jobs }, worker));
} catch (e) {
  console.error(`\nloom: ${e.message}`);
  process.exit(1);
}
if (todo.length) process.stderr.write('\n');
execFileSync('g++', ['-shared', '-pthread', '-o', join(out, 'loom.node'), ...objs, '-ldl'], { stdio: 'inherit' });
console.error(`loom: built ${join(out, 'loom.node')} (AVX-512 emulated through SIMDe)`);
