// The native framing guard (native/net/http_guard.cc): the checks of server/guard.ts inside uWS's own
// reads, the default guard. test/service/http-framing.test.ts checks what clients get from it; this
// file checks what is particular to it: heads and chunk lines split across reads are held until whole,
// what follows an HTTP/1.0 request is dropped, its scanner takes exactly the heads the JS scanner takes,
// servers without the guard in the same process are not touched, and the proxy guard still serves.
import t from 'tap';
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { createServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';
import { MAX_HEADERS, plainHeadBodyLength } from '../../server/guard.ts';
import { createServices } from '../../src/service/index.ts';
import { addon } from '../../src/native/addon.ts';
import { FakeRuntime } from './fake-runtime.ts';

async function start(guard: boolean | 'proxy') {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-guard-native-'));
  const services = await createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  const server = await createServer({ services, log: createLogger({ level: 'silent' }), guard });
  t.teardown(async () => {
    await server.close({ timeoutMs: 500 });
    rmSync(dataDir, { recursive: true, force: true });
  });
  return server;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** sends `parts` as separate writes `gapMs` apart; collects the answer until the server closes */
interface Answer { statuses: number[]; closed: boolean }
function raw(port: number, parts: Array<string | Buffer>, gapMs = 0, ms = 3000): Promise<Answer> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.setNoDelay(true);
    let text = '';
    let closed = false;
    s.on('data', (d) => { text += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => {
      closed = true;
      resolve({ statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), closed });
    });
    s.setTimeout(ms, () => { s.destroy(); });
    s.on('connect', async () => {
      for (const p of parts) {
        if (s.destroyed) return;
        s.write(p);
        if (gapMs) await sleep(gapMs);
      }
    });
  });
}
const bytes = (s: string) => [...Buffer.from(s, 'latin1')].map((b) => Buffer.from([b]));

const H = 'Host: x\r\n';
const guarded = await start(true);

t.test('the native guard is the default and checks every connection of a guarded server', async (t) => {
  const before = addon.httpGuardCounts();
  t.same((await raw(guarded.port, [`GET /health HTTP/1.1\r\n${H}Connection: close\r\n\r\n`])).statuses, [200]);
  t.same((await raw(guarded.port, [`get /health HTTP/1.1\r\n${H}\r\n`])).statuses, [400]);
  const after = addon.httpGuardCounts();
  t.equal(after.connections - before.connections, 2, 'two connections guarded');
  t.equal(after.plainHeads - before.plainHeads, 1, 'the plain head passed by the native scanner');
  t.equal(after.refused - before.refused, 1, 'the lowercase method refused');
});

t.test('heads, bodies and chunk lines arriving a byte at a time are held until whole', async (t) => {
  const body = '{"name":"p"}';
  const stream = [
    `GET /health HTTP/1.1\r\n${H}\r\n`,
    `POST /projects HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    `POST /projects HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n5\r\n{"nam\r\n7\r\ne":"q"}\r\n0\r\n\r\n`,
    `GET /health HTTP/1.0\r\n\r\n`,
  ].join('');
  const r = await raw(guarded.port, bytes(stream), 1, 10_000);
  t.same(r.statuses, [200, 401, 401, 200], 'four answers in order (no key: 401)');
  t.ok(r.closed, 'closed after the HTTP/1.0 request');
  const chunked = `POST /projects HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n\r\n5\r\n{"nam\r\nzz\r\n`;
  const bad = await raw(guarded.port, bytes(chunked), 1);
  // uWS may answer the request (401: no key) before its body ends; the malformed chunk line then ends it
  t.equal(bad.statuses.at(-1), 400, 'a malformed chunk size after a good chunk, sent a byte at a time');
  const control = await raw(guarded.port, bytes(`GET /health HTTP/1.1\r\n${H}X-A: a\x01b\r\n\r\n`), 1);
  t.same(control.statuses, [400], 'a control byte in a head sent a byte at a time');
});

t.test('after an HTTP/1.0 request and its body, the rest of the connection is dropped', async (t) => {
  const body = '{"name":"p"}';
  const r = await raw(guarded.port, [
    `POST /projects HTTP/1.0\r\nContent-Length: ${body.length}\r\n\r\n${body}GET /health HTTP/1.1\r\n${H}\r\n`,
  ]);
  t.same(r.statuses, [401], 'one answer');
  t.ok(r.closed);
});

t.test('an HTTP/1.0 head rewritten longer than it came, pipelined behind plain ones in one read', async (t) => {
  const plain = `GET /health HTTP/1.1\r\n${H}\r\n`.repeat(20);
  const grown = 'GET http://localhost/health HTTP/1.1\r\n\r\nGET /health HTTP/1.0\r\n\r\n';
  const r = await raw(guarded.port, [`${plain}${grown}`]);
  t.same(r.statuses, Array(22).fill(200));
  t.ok(r.closed);
});

/** `agree(text)`: the native and the JS scanner give the same answer for the head `text` (its CRLF CRLF added);
 * `taken()`: how many heads both took so far */
function scanners() {
  let taken = 0;
  return {
    agree(text: string): boolean {
      const buf = Buffer.from(`${text}\r\n\r\n`, 'latin1');
      const end = buf.indexOf('\r\n\r\n');
      const js = plainHeadBodyLength(buf, end);
      if (js >= 0) taken++;
      return addon.httpGuardPlainHeadBodyLength(buf, end, MAX_HEADERS) === js;
    },
    taken: () => taken,
  };
}

t.test('the native scanner takes exactly the heads the JS scanner takes, with the same body length', async (t) => {
  const mostly = <T>(good: T[], bad: T[]) =>
    fc.oneof({ arbitrary: fc.constantFrom(...good), weight: 6 }, { arbitrary: fc.constantFrom(...bad), weight: 1 });
  const method = mostly(['GET', 'POST', 'M-SEARCH'], ['get', 'G T', '']);
  const target = mostly(['/', '/health?a=1', '/%ZZ'], ['http://h/p', '*', '/a\xa0b', '/a b', '']);
  const version = mostly(['HTTP/1.1'], ['HTTP/1.0', 'HTTP/2.0', 'http/1.1', 'HTTP/1.1 ']);
  const line = mostly(
    ['Host: h', 'host:h', 'HOST:  h:1 ', 'Content-Length: 5', 'content-length:0', 'Content-Length: 007',
      'Content-Length: 123456789012345', 'Connection: close', 'X-A: b\tc', 'X-Y: z', 'Accept: */*'],
    ['Host:', 'Content-Length: 1234567890123456', 'Content-Length: 5 5', 'Content-Length: abc', 'Content-Length: -1',
      'Transfer-Encoding: chunked', 'X-Loom-Peer: 1.2.3.4', 'X-A: \x01', 'X-A: \xe9', 'X A: b', ': b', 'X-A b',
      ' folded', 'X-A: b\rc', 'X-A: b\nc', 'Content-Length: 5\t'],
  );
  const head = fc.tuple(method, target, version, fc.array(line, { maxLength: MAX_HEADERS + 2 }))
    .map(([m, u, v, ls]) => [`${m} ${u} ${v}`, ...ls].join('\r\n'));
  const scan = scanners();
  fc.assert(fc.property(head, scan.agree), { seed: 13, numRuns: 20_000 });
  t.ok(scan.taken() > 100, `both took ${scan.taken()} heads`);
});

t.test('long targets and header values (the 16-byte scan) agree with the JS scanner, wherever a bad byte falls',
  async (t) => {
    // mostly visible ASCII, with spaces, tabs and a few bytes a head must not carry, in runs up to 80 bytes
    const ch = fc.oneof({ arbitrary: fc.integer({ min: 0x21, max: 0x7e }), weight: 40 },
      { arbitrary: fc.constantFrom(0x20, 0x09), weight: 3 },
      { arbitrary: fc.constantFrom(0x00, 0x01, 0x0a, 0x0d, 0x1f, 0x7f, 0x80, 0xe9, 0xff), weight: 1 });
    const run = fc.array(ch, { maxLength: 80 }).map((a) => Buffer.from(a).toString('latin1'));
    const scan = scanners();
    fc.assert(fc.property(run, run, (path, value) =>
      scan.agree(`GET /${path} HTTP/1.1\r\nHost: h\r\nX-API-Key: ${value}\r\nAccept: ${value.slice(3)}`)),
    { seed: 17, numRuns: 20_000 });
    t.ok(scan.taken() > 1000, `both took ${scan.taken()} heads`);
  });

t.test('a server without the guard in the same process is left to uWS', async (t) => {
  const plain = await start(false);
  const before = addon.httpGuardCounts();
  const r = await raw(plain.port, [`get /health HTTP/1.1\r\n${H}\r\n`], 0, 1500);
  t.same(r.statuses, [], 'uWS answers nothing to a lowercase method');
  t.same((await raw(plain.port, [`GET /health HTTP/1.1\r\n${H}Connection: close\r\n\r\n`])).statuses, [200]);
  t.equal(addon.httpGuardCounts().connections, before.connections, 'no connection guarded');
});

t.test('the proxy guard (LOOM_HTTP_GUARD=proxy) still answers and serves', async (t) => {
  const proxy = await start('proxy');
  t.same((await raw(proxy.port, [`get /health HTTP/1.1\r\n${H}\r\n`])).statuses, [400]);
  t.same((await raw(proxy.port, ['GET /health HTTP/1.0\r\n\r\n'])).statuses, [200]);
});

/** a keep-alive connection from `localAddress`; `get(path)` resolves with the X-RateLimit-Remaining of the answer */
function client(port: number, localAddress: string) {
  const s = net.connect({ port, host: '127.0.0.1', localAddress });
  s.setNoDelay(true);
  let text = '';
  let waiting: ((remaining: number) => void) | null = null;
  s.on('data', (d) => {
    text += d.toString('latin1');
    const m = /X-RateLimit-Remaining: (\d+)\r\n[\s\S]*?\r\n\r\n/i.exec(text);
    if (m && waiting) { text = ''; const w = waiting; waiting = null; w(Number(m[1])); }
  });
  s.on('error', () => {});
  return {
    get: (path: string) => new Promise<number>((resolve) => {
      waiting = resolve;
      s.write(`GET ${path} HTTP/1.1\r\n${H}\r\n`);
    }),
    close: () => new Promise<void>((r) => { s.once('close', () => r()); s.end(); }),
  };
}

t.test("each connection's client address, kept per guarded connection, also when a descriptor is reused", async (t) => {
  // GET /auth/setup counts in the per-IP default window (X-RateLimit-Scope: ip): one window per address
  const a = client(guarded.port, '127.0.0.2');
  const b = client(guarded.port, '127.0.0.3');
  const a1 = await a.get('/auth/setup');
  const b1 = await b.get('/auth/setup');
  t.equal(await a.get('/auth/setup'), a1 - 1, "127.0.0.2's window counts its own requests");
  t.equal(await b.get('/auth/setup'), b1 - 1, "127.0.0.3's window counts its own requests");
  t.equal(await a.get('/auth/setup'), a1 - 2);
  await Promise.all([a.close(), b.close()]);
  // new connections (the kernel reuses the closed ones' descriptors) from the other address each
  const c = client(guarded.port, '127.0.0.3');
  t.equal(await c.get('/auth/setup'), b1 - 2, 'a new connection from 127.0.0.3 is counted as 127.0.0.3');
  await c.close();
  const d = client(guarded.port, '127.0.0.4');
  const d1 = await d.get('/auth/setup');
  t.equal(d1, a1, 'a connection from a third address starts a window of its own');
  t.equal(await d.get('/auth/setup'), d1 - 1);
  await d.close();
});
