#!/usr/bin/env node
// Builds the native addon (build/Release/loom.node).
//   default:  node-gyp (binding.gyp), CPU kernels for every ISA with run-time dispatch.
//   --cuda:   cmake-js (CMakeLists.txt), the same sources plus the CUDA kernels when nvcc is found.
//   --clean:  full rebuild instead of an incremental one.
// Builds are serialized with a lock so parallel invocations never corrupt build/.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, openSync, closeSync, unlinkSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import os from 'node:os';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = new Set(process.argv.slice(2));
const require = createRequire(import.meta.url);
const jobs = String(Math.max(1, os.cpus().length));

function run(cmd, argv, env = {}) {
  const r = spawnSync(cmd, argv, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });
  if (r.status !== 0) {
    console.error(`loom: build step failed: ${cmd} ${argv.join(' ')}`);
    process.exit(r.status ?? 1);
  }
}

function nodeGyp() {
  // npm passes its bundled node-gyp to lifecycle scripts; outside npm, look for it next to npm.
  const candidates = [
    process.env.npm_config_node_gyp,
    join(dirname(process.execPath), '../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'),
    '/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
    '/usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
  ];
  for (const c of candidates) if (c && existsSync(c)) return c;
  try { return require.resolve('node-gyp/bin/node-gyp.js'); } catch { /* fallthrough */ }
  console.error('loom: node-gyp not found (it ships with npm); run the build through `npm run build:native`.');
  process.exit(1);
}

function nodedirArgs() {
  // Build against the headers of the running Node when they are installed locally (no download).
  const nd = process.env.npm_config_nodedir || (existsSync('/usr/include/node/node_api.h') ? '/usr' : null)
    || (existsSync(join(dirname(process.execPath), '../include/node/node_api.h')) ? join(dirname(process.execPath), '..') : null);
  return nd ? [`--nodedir=${nd}`] : [];
}

// Cross-process lock (O_EXCL lock file; stale after 30 minutes).
const lockPath = join(root, '.build.lock');
function lock() {
  for (let i = 0; ; i++) {
    try { closeSync(openSync(lockPath, 'wx')); return; } catch {
      try { if (Date.now() - statSync(lockPath).mtimeMs > 30 * 60_000) unlinkSync(lockPath); } catch { /* raced */ }
      if (i % 30 === 0) console.error('loom: waiting for another native build to finish...');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
    }
  }
}
function unlock() { try { unlinkSync(lockPath); } catch { /* gone */ } }

lock();
process.on('exit', unlock);
for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { unlock(); process.exit(130); });

if (args.has('--cuda')) {
  const cmakeJs = require.resolve('cmake-js/bin/cmake-js');
  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  if (!nvcc) console.error('loom: nvcc not found; building the CPU kernels only.');
  run(process.execPath, [cmakeJs, args.has('--clean') ? 'rebuild' : 'compile', '--out', 'build-cmake', '-p', jobs,
    `--CDLOOM_CUDA=${nvcc ? 'ON' : 'OFF'}`]);
  // The loader looks in build/Release: put the CMake-built addon there.
  mkdirSync(join(root, 'build/Release'), { recursive: true });
  copyFileSync(join(root, 'build-cmake/Release/loom.node'), join(root, 'build/Release/loom.node'));
} else {
  const gyp = nodeGyp();
  const nd = nodedirArgs();
  if (args.has('--clean') || !existsSync(join(root, 'build/Makefile'))) {
    run(process.execPath, [gyp, 'rebuild', `-j`, jobs, ...nd]);
  } else {
    run(process.execPath, [gyp, 'configure', ...nd]);
    run(process.execPath, [gyp, 'build', '-j', jobs, ...nd]);
  }
}
