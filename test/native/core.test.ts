import t from 'tap';
import { cpuInfo, getIsa, setIsa, getThreads, setThreads, forEachIsa } from '../../src/native/index.ts';
import { addon } from '../../src/native/addon.ts';

t.test('cpu info reports the dispatch paths this CPU supports', async (t) => {
  const info = cpuInfo();
  t.ok(info.supportedIsas.includes('portable'));
  t.equal(info.bestIsa, info.supportedIsas[info.supportedIsas.length - 1]);
  t.ok(info.threads >= 1);
});

t.test('setIsa switches paths and rejects unknown or unsupported ones', async (t) => {
  const prev = getIsa();
  setIsa('portable');
  t.equal(getIsa(), 'portable');
  setIsa(prev);
  t.throws(() => setIsa('sse9' as never), /unknown isa/);
  if (!cpuInfo().supportedIsas.includes('avx512')) t.throws(() => setIsa('avx512'), /not supported/);
});

t.test('thread pool can be resized', async (t) => {
  const prev = getThreads();
  setThreads(1);
  t.equal(getThreads(), 1);
  setThreads(prev);
  t.equal(getThreads(), prev);
  t.throws(() => setThreads(0), RangeError);
});

t.test('bf16 and f16 conversions round-trip on every path', async (t) => {
  const n = 1037;
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (Math.sin(i * 12.9898) * 43758.5453) % 7;
  await forEachIsa((isa) => {
    const h = new Uint16Array(n);
    const y = new Float32Array(n);
    addon.convertF32ToBf16(x, h);
    addon.convertBf16ToF32(h, y);
    for (let i = 0; i < n; i++) {
      if (Math.abs(y[i] - x[i]) > Math.abs(x[i]) * 2 ** -8) {
        t.fail(`${isa}: bf16 round trip at ${i}: ${x[i]} -> ${y[i]}`);
        return;
      }
    }
    // f16 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff, smallest subnormal 0x0001
    const f16 = new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001]);
    const out = new Float32Array(4);
    addon.convertF16ToF32(f16, out);
    t.same(Array.from(out), [1, -2, 65504, 2 ** -24], `${isa}: f16 decode`);
  });
});

t.test('wrong argument types get a clear TypeError', async (t) => {
  t.throws(() => addon.convertBf16ToF32(new Float32Array(2), new Float32Array(2)), /src must be a Uint16Array/);
  t.throws(() => addon.convertBf16ToF32(new Uint16Array(4), new Float32Array(2)), /dst has 2 elements, needs 4/);
});

t.test('pool: thousands of short regions of every kind from several threads at once, each item run once', async (t) => {
  // regions from 4 libuv threads at once (as a decode step beside an embedding), the pool resized while they run;
  // a share skipped or run twice (pool_run_dynamic closes a worker's share that has not started) shows as a count
  // other than 1, a lost hand-off as a hang (the test's timeout)
  const prev = getThreads();
  setThreads(Math.max(2, prev));
  try {
    const runs = Array.from({ length: 4 }, (_, i) => addon.poolStress(4000, i + 1));
    for (const n of [3, 1, 2, 2]) {
      await new Promise((r) => setTimeout(r, 20));
      setThreads(n);
    }
    t.same(await Promise.all(runs), [0, 0, 0, 0], 'every item of every region ran exactly once');
  } finally {
    setThreads(prev);
  }
});

t.test('a pool task that throws rejects the call; the process and the pool survive', async (t) => {
  const prev = getThreads();
  setThreads(Math.max(2, prev));
  try {
    const n = getThreads();
    t.equal(await addon.poolCheck(-1), n, 'every share runs');
    // before: an exception in a worker thread's share called std::terminate (the process died)
    for (let tid = 0; tid < n; tid++) await t.rejects(addon.poolCheck(tid), /bad_alloc/, `share ${tid} throws`);
    t.equal(await addon.poolCheck(-1), n, 'the pool still runs every share afterwards');
  } finally {
    setThreads(prev);
  }
});
