// Quantized linear kernels alone: GMAC per CPU-second of one weight matrix against M rows of x, per type and
// layout (the file's, or quant_pack's with `packed`), on the active ISA, 1 thread, the weights packed once.
//   node --import tsx bench/quant-kernels.mts [--types Q4_K,Q6_K] [--m 1,8,32] [--shapes 576x1536,...] [--ms 300]
//     [--layouts file,packed]
// Shapes are N×K (rows × values per row). CPU time, so that it holds on a loaded machine; best of 3 rounds of
// about --ms each. LOOM_ADDON compares two builds of the addon; --one-per-call for an addon without quantLinear's
// reps argument (one product per call: its packed rows then include the packing, so give it --layouts file).
import { addon } from '../src/native/addon.ts';
import { getIsa, setThreads } from '../src/native/cpu.ts';
import { randomBlocks, rng, type KeptType } from '../test/native/random-blocks.ts';

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : def);
const types = flag('--types', 'Q4_K,Q6_K').split(',') as KeptType[];
const Ms = flag('--m', '1,8,32').split(',').map(Number);
const shapes = flag('--shapes', '576x1536,2816x1024,1024x2816,4096x4096').split(',')
  .map((s) => s.split('x').map(Number));
const layouts = flag('--layouts', 'file,packed').split(',');
const budget = Number(flag('--ms', '300'));
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
setThreads(1);
console.log(`quant kernels: 1 thread, ISA ${getIsa()}, GMAC per CPU-second (best of 3)`);
const rnd = rng(7);
for (const type of types)
  for (const [N, K] of shapes) {
    const blocks = randomBlocks(type, N, K, rnd, () => 0.01);
    const line: string[] = [];
    for (const layout of layouts)
      for (const M of Ms) {
        const x = new Float32Array(M * K).map(() => rnd() * 2 - 1);
        const packed = layout === 'packed';
        // reps per call: one call runs the product `reps` times on weights packed once (1 on an older addon)
        const reps = argv.includes('--one-per-call') ? 1 : Math.max(1, Math.round(1e10 / (N * K * Math.max(M, 4))));
        addon.quantLinear(type, blocks, N, K, x, M, packed, reps);
        // CPU ms of one call running the product `r` times (best of 3 rounds)
        const time = (r: number) => {
          let best = Infinity;
          for (let round = 0; round < 3; round++) {
            let n = 0;
            const c0 = cpuMs();
            while (cpuMs() - c0 < budget / 3 || n === 0) {
              addon.quantLinear(type, blocks, N, K, x, M, packed, r);
              n++;
            }
            best = Math.min(best, (cpuMs() - c0) / n);
          }
          return best;
        };
        // the packing (reps 0) taken off the packed layout's calls
        const pack = packed && !argv.includes('--one-per-call') ? time(0) : 0;
        if (packed && M === Ms[0]) line.push(`quant_pack ${pack.toFixed(2)} ms`);
        const per = (time(reps) - pack) / reps;
        line.push(`${layout} M=${M} ${((M * N * K) / per / 1e6).toFixed(1)}`);
      }
    console.log(`${type} ${N}x${K}: ${line.join(', ')}`);
  }
