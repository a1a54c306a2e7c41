#!/usr/bin/env node
// `npm test`: runs the tap suite (test/**/*.test.ts) and ends with one line `N passed, N failed`
// counting individual assertions, which CI reads. Extra arguments go to tap (e.g. a test file).
import { spawn } from 'node:child_process';

const tapBin = new URL('../node_modules/.bin/tap', import.meta.url).pathname;
// The whole suite runs six files at once (package.json's tap `jobs`): many files wait on servers,
// child processes and polls, so more files than cores keep the cores busier (a clean-clone run with six
// jobs: 983 s for the tests, whose per-file times add up to 2,769 s). Each file's native thread pool
// gets one thread (LOOM_THREADS=1, unless set), since a pool of one per core spins and yields for cores
// the other files hold. The tests of threading itself set their thread counts.
const wholeSuite = process.argv.length <= 2;
const threads = process.env.LOOM_THREADS ?? (wholeSuite ? '1' : undefined);
const child = spawn(tapBin, ['--reporter=tap', ...process.argv.slice(2)], {
  stdio: ['inherit', 'pipe', 'inherit'],
  env: {
    ...process.env,
    LOOM_LOG_LEVEL: process.env.LOOM_LOG_LEVEL ?? 'silent',
    ...(threads !== undefined ? { LOOM_THREADS: threads } : {}),
  },
});

let passed = 0;
let failed = 0;
let buf = '';
// A TAP line `ok` / `not ok` directly followed (in the stream) by no indented children is a
// leaf assertion. Subtest summary lines come right after their children's plan `1..N`, so a
// point that follows a plan line at deeper indentation is a summary and is not counted twice.
let lastPlanIndent = -1;
function onLine(line) {
  const m = /^(\s*)(not ok|ok)\b(.*)$/.exec(line);
  if (m) {
    const indent = m[1].length;
    const isSummary = lastPlanIndent > indent;
    lastPlanIndent = -1;
    const skipped = /#\s*(SKIP|TODO)/i.test(m[3]);
    if (isSummary || skipped) {
      // a subtest that failed without failing children (timeout, crash) still counts as a failure
      if (isSummary && m[2] === 'not ok' && failedSinceSummary === 0) failed++;
      failedSinceSummary = 0;
      return;
    }
    if (m[2] === 'ok') passed++;
    else { failed++; failedSinceSummary++; }
    return;
  }
  const p = /^(\s*)1\.\.\d+/.exec(line);
  if (p) lastPlanIndent = p[1].length;
}
let failedSinceSummary = 0;

child.stdout.on('data', (d) => {
  process.stdout.write(d);
  buf += d.toString();
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    onLine(buf.slice(0, i));
    buf = buf.slice(i + 1);
  }
});
child.on('close', (code) => {
  if (buf) onLine(buf);
  if (code !== 0 && failed === 0) failed = 1; // tap itself failed (e.g. a file crashed before any test point)
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(code ?? 1);
});
