// Job leases (src/service/jobs/leases.ts) on one store, two lease holders standing for two processes:
// a renewed lease is never taken over; one that expires is taken over exactly once (by one of two
// supervisors), and its old holder learns at its next renewal that it lost it; a released lease is
// taken over at once. (Same process here, so the dead-process shortcut never applies: expiry only.)
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.ts';
import { createLeases, type Leases } from '../../src/service/jobs/leases.ts';

const dir = mkdtempSync(join(tmpdir(), 'loom-leases-'));
const store = await openStore(dir);
t.teardown(async () => { await store.close(); rmSync(dir, { recursive: true, force: true }); });
const TTL = 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** a lease holder whose 'evaluation' kind has `ids` in flight; it records what it took over */
function holder(ids: string[]) {
  const leases = createLeases({ store, ttlMs: TTL });
  const taken: string[] = [];
  leases.supervise('evaluation', {
    inFlight: async () => ids,
    takeOver: async (_t, id) => { taken.push(id); return 'adopt'; },
  });
  return { leases, taken };
}
const claim = (l: Leases, id: string, lost: string[]) => l.claim('evaluation', id, async () => id, () => lost.push(id));

t.test('renewed leases stay; expired ones are taken over once, and the old holder learns it lost them', async (t) => {
  const ids = ['renewed', 'stale'];
  const a = holder(ids);
  const b = holder(ids);
  const c = holder(ids);
  const lost: string[] = [];
  t.equal(await claim(a.leases, 'renewed', lost), 'renewed');
  t.equal(await claim(a.leases, 'stale', lost), 'stale');
  t.teardown(async () => { await a.leases.close(); await b.leases.close(); await c.leases.close(); });

  await Promise.all([b.leases.sweep(), c.leases.sweep()]);
  t.same([...b.taken, ...c.taken], [], 'nothing is taken over while the leases are fresh');

  // 'renewed' is kept alive by a renewal loop; 'stale' stands for a paused process: nothing renews it
  a.leases.start();
  a.leases.forget('evaluation', 'stale');
  await sleep(2.5 * TTL);
  await Promise.all([b.leases.sweep(), c.leases.sweep()]);
  t.same([...b.taken, ...c.taken], ['stale'], 'only the expired lease is taken over, by one of the two supervisors');
  const winner = b.taken.length ? b : c;
  t.ok(winner.leases.holds('evaluation', 'stale'), 'the supervisor that took it holds it now');
  const renewed = await store.leases.get('evaluation', 'renewed');
  t.equal(renewed?.owner, a.leases.owner, 'the renewed lease is still its owner\'s');
  t.equal((await store.leases.get('evaluation', 'stale'))?.owner, winner.leases.owner);

  // a holder whose lease another process took over (as the winner above took 'stale') renews
  const a2 = createLeases({ store, ttlMs: TTL });
  const lost2: string[] = [];
  t.equal(await claim(a2, 'mine', lost2), 'mine');
  await store.tx((tx) => {
    const l = { kind: 'evaluation' as const, id: 'mine', owner: 'someone-else', host: 'h', pidns: 'p', pid: 1 };
    tx.leases.put({ ...l, expires_at: Date.now() + 60_000 });
  });
  a2.start();
  await sleep(TTL);
  t.same(lost2, ['mine'], 'a holder whose lease was taken learns it at its next renewal');
  t.notOk(a2.holds('evaluation', 'mine'));
  await a2.close();
  t.same(lost, [], 'a holder that kept renewing lost nothing');
});

t.test('a released lease is taken over at the next sweep; a closed holder releases everything', async (t) => {
  const ids = ['released', 'closed'];
  const a = holder(ids);
  const b = holder(ids);
  t.teardown(async () => { await b.leases.close(); });
  await claim(a.leases, 'released', []);
  await claim(a.leases, 'closed', []);
  await a.leases.release('evaluation', 'released');
  await b.leases.sweep();
  t.same(b.taken, ['released'], 'taken over without waiting for an expiry');
  await a.leases.close();
  await b.leases.sweep();
  t.same(b.taken, ['released', 'closed'], 'close() released the rest');
});
