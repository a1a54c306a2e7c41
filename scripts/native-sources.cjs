// Lists the C++ sources of the native addon for binding.gyp and CMakeLists.txt.
// Usage: node scripts/native-sources.cjs <portable|avx2|avx512>
//   avx512: files named *_avx512.cc (compiled with AVX-512 flags)
//   avx2:   files named *_avx2.cc   (compiled with AVX2+FMA flags)
//   portable: every other .cc under native/ (except native/cuda and native/test), incl. the N-API layer.
// Files named *.wip.cc are ignored so half-written code never breaks the build.
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..');
const kind = process.argv[2] || 'portable';
const out = [];
function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name === 'cuda' || e.name === 'test') continue;
      walk(p);
    } else if (e.name.endsWith('.cc') && !e.name.endsWith('.wip.cc')) {
      const k = e.name.endsWith('_avx512.cc') ? 'avx512' : e.name.endsWith('_avx2.cc') ? 'avx2' : 'portable';
      if (k === kind) out.push(path.relative(root, p).split(path.sep).join('/'));
    }
  }
}
walk(path.join(root, 'native'));
out.sort();
process.stdout.write(out.join(process.argv[3] === '--lines' ? '\n' : ' '));
