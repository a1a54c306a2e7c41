// HTTP/1.x framing guard, on by default (LOOM_HTTP_GUARD=0 or createServer({guard: false}) turn it
// off): it checks each request head before uWebSockets.js sees it.
//
// Why it exists: the uWS build Loom runs (@trufflesuite/uws-js-unofficial 20.30) calls no handler
// for a request its parser does not take, so Loom cannot answer one. Measured with raw sockets:
// lowercase methods, `Content-Length: abc`, Content-Length with Transfer-Encoding and a missing
// Host among other headers are closed at once with no answer; HTTP/1.0, absolute-form targets,
// 49 or more headers, control bytes in a header and unparseable request lines get no answer until
// uWS's 10 s idle timeout closes the connection. The guard answers those as a production front
// does: 400 (or 431 for too many or too large headers, 501 for an unknown transfer coding, 505
// for a version other than 1.0/1.1), with the native error body `{"detail"}` and
// `Connection: close`; it serves HTTP/1.0 by passing it on as HTTP/1.1 with `Connection: close`
// (and the local address as Host when there is none), and absolute-form targets in origin form.
// Line ends must be CRLF: a head with a bare LF is a 400 (uWS takes none).
//
// Two guards apply these rules. The default is native (native/net/http_guard.cc): it runs inside
// uWS's own reads of the public socket, in the buffer uWS reads into, scanning plain heads in C++
// and calling examineHead (below) for the others, so a well-formed request costs no extra hop
// (installNativeGuard, guardPort). Where it cannot be installed (not Linux, no addon, a worker
// thread) or with LOOM_HTTP_GUARD=proxy, the proxy below serves instead.
//
// The proxy's cost: every byte crosses one more socket pair and the JS heap, which costs about as
// much per request as uWS itself (figures in the README, `npm run bench -- http --also proxy`). To
// keep it low,
// uWS listens on a unix socket in a private folder (no loopback TCP stack on the inner hop, and no
// other local user can reach uWS around the guard), and a plain head is checked in one pass over
// its bytes and passed on with one write (plainHeadBodyLength); only other heads are parsed as
// strings (checkHead), which also words the refusals. Behind a reverse proxy that answers
// malformed requests itself (nginx, HAProxy, a cloud load balancer), LOOM_HTTP_GUARD=0 saves it.
//
// Behind the proxy, the client's address reaches uWS in an `X-Loom-Peer` header the proxy adds (and
// drops from clients), trusted by the router only in that mode (the native guard leaves uWS the
// client's own socket). Not a PROXY v2 header: uWS 20.30 drops, with no answer, the first request
// of a connection whose head is over about 4 KiB after one.
//
// Framing (both guards): a head is read whole (up to MAX_HEAD_BYTES), checked, rewritten when needed and passed
// on; then the body is passed through by Content-Length or by chunk framing, so the next head of a
// keep-alive connection is found. Responses flow back unchanged.
import net from 'node:net';
import { STATUS_CODES } from 'node:http';
import { isMainThread } from 'node:worker_threads';

/**
 * Header lines a client may send: uWS 20.30 passes at most 48 (49 or more get no answer at all),
 * and the guard adds X-Loom-Peer
 */
export const MAX_HEADERS = 47;
/** the header that carries the client's address to uWS (lower case, as uWS reports names) */
export const PEER_HEADER = 'x-loom-peer';
export const MAX_HEAD_BYTES = 16 * 1024;
/** a client connection idle this long with no connection to uWS is closed (uWS's own idle timeout) */
const IDLE_MS = 10_000;

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const METHOD = /^[A-Z][A-Z-]*$/;
// a header value: visible ASCII, obs-text, space and tab (no other control byte)
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const TARGET = /^[\x21-\x7e\x80-\xff]+$/;

class Refusal { constructor(readonly status: number, readonly detail: string) {} }

export interface CheckedHead {
  /** the head to pass on (rewritten for HTTP/1.0 and absolute-form), with its final CRLF CRLF */
  head: string;
  /** body framing of the request */
  body: { kind: 'none' } | { kind: 'length'; bytes: number } | { kind: 'chunked' };
  /** HTTP/1.0: the connection ends after this request */
  last: boolean;
}

/**
 * Checks one request head (without its final blank line, latin1); throws a Refusal. `peer`: the
 * client's address, passed on as `X-Loom-Peer` (one a client sends is dropped).
 */
export function checkHead(text: string, localHost: string, peer?: string): CheckedHead {
  const lines = text.split('\r\n');
  const m = /^(\S+) (\S+) HTTP\/(\d)\.(\d)$/.exec(lines[0] ?? '');
  if (!m) {
    if (/^\S+ \S+$/.test(lines[0] ?? '')) throw new Refusal(505, 'HTTP/0.9 is not supported; send HTTP/1.1');
    throw new Refusal(400, 'Malformed request line');
  }
  const [, method, rawTarget, major, minor] = m as unknown as [string, string, string, string, string];
  if (major !== '1' || (minor !== '0' && minor !== '1')) {
    throw new Refusal(505, `HTTP/${major}.${minor} is not supported; send HTTP/1.1`);
  }
  if (!METHOD.test(method)) {
    throw new Refusal(400, `Malformed method ${JSON.stringify(method)} (methods are upper case)`);
  }
  if (!TARGET.test(rawTarget)) throw new Refusal(400, 'Malformed request target');
  let target = rawTarget;
  let authority: string | null = null;
  if (!target.startsWith('/')) {
    const a = /^https?:\/\/([^/?#]+)([^#]*)$/i.exec(target);
    if (!a) throw new Refusal(400, 'The request target must be a path (or an absolute http URL)');
    authority = a[1]!;
    target = a[2] ? (a[2].startsWith('/') ? a[2] : `/${a[2]}`) : '/';
  }
  const out: string[] = [];
  let host: string | null = null;
  let length: string | null = null;
  let te: string | null = null;
  if (lines.length - 1 > 4 * MAX_HEADERS) throw new Refusal(431, `Too many header fields (at most ${MAX_HEADERS})`);
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const c = line.indexOf(':');
    const name = c > 0 ? line.slice(0, c) : '';
    if (!TOKEN.test(name)) throw new Refusal(400, `Malformed header line ${i}`);
    const value = line.slice(c + 1).trim();
    if (!FIELD_VALUE.test(value)) throw new Refusal(400, `Control character in header ${name}`);
    const lower = name.toLowerCase();
    if (lower === 'host') {
      if (host !== null) throw new Refusal(400, 'More than one Host header');
      host = value;
    } else if (lower === 'content-length') {
      const bad = !/^\d{1,15}$/.test(value) || (length !== null && length !== value);
      if (bad) throw new Refusal(400, 'Malformed Content-Length');
      length = value;
    } else if (lower === 'transfer-encoding') {
      te = te === null ? value : `${te}, ${value}`;
    } else if (lower === 'connection' && minor === '0') continue; // replaced below
    else if (lower === PEER_HEADER && peer !== undefined) continue; // only the guard says who the client is
    out.push(line);
  }
  if (te !== null && length !== null) throw new Refusal(400, 'Content-Length together with Transfer-Encoding');
  if (te !== null && te.toLowerCase() !== 'chunked') {
    throw new Refusal(501, `Transfer-Encoding ${te} is not supported (only chunked)`);
  }
  if (te !== null && minor === '0') throw new Refusal(400, 'Transfer-Encoding in an HTTP/1.0 request');
  if (host === null) {
    if (minor === '1' && authority === null) throw new Refusal(400, 'Missing Host header');
    out.push(`Host: ${authority ?? localHost}`);
  }
  if (minor === '0') out.push('Connection: close');
  if (peer !== undefined) out.push(`X-Loom-Peer: ${peer}`);
  if (out.length > MAX_HEADERS + (peer === undefined ? 0 : 1)) {
    throw new Refusal(431, `Too many header fields (at most ${MAX_HEADERS})`);
  }
  const head = `${method} ${target} HTTP/1.1\r\n${out.length ? `${out.join('\r\n')}\r\n` : ''}\r\n`;
  const body: CheckedHead['body'] = te !== null ? { kind: 'chunked' }
    : length !== null && length !== '0' ? { kind: 'length', bytes: Number(length) } : { kind: 'none' };
  return { head, body, last: minor === '0' };
}

function refusalBytes(r: Refusal): Buffer {
  const body = JSON.stringify({ detail: r.detail });
  return Buffer.from(`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? 'Bad Request'}\r\n`
    + `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`
    + `Connection: close\r\n\r\n${body}`);
}
const CHUNK_SIZE_REFUSAL = refusalBytes(new Refusal(400, 'Malformed chunk size'));
const CHUNK_BODY_REFUSAL = refusalBytes(new Refusal(400, 'Malformed chunked body'));

/**
 * What becomes of a request head that plainHeadBodyLength did not take: `buf` holds it from its
 * first byte, `end` is the offset of its CRLF CRLF or -1 when that has not arrived. null: wait for
 * more bytes; a Buffer: the refusal to send (then close); else the head to pass on, its body
 * length (-1: chunked) and whether it is the connection's last request (HTTP/1.0). Both guards
 * (the proxy below and the native one in uWS's reads) decide with this.
 */
export type HeadDecision = null | Buffer | { head: Buffer; body: number; last: boolean };
export function examineHead(buf: Buffer, end: number, localHost: string, peer?: string): HeadDecision {
  try {
    if (end > MAX_HEAD_BYTES || (end < 0 && buf.length > MAX_HEAD_BYTES)) {
      throw new Refusal(431, `Request head larger than ${MAX_HEAD_BYTES} bytes`);
    }
    if (bareLf(buf, end < 0 ? buf.length : end)) {
      throw new Refusal(400, 'Malformed request head: lines must end in CRLF');
    }
    if (end < 0) return null;
    const c = checkHead(buf.subarray(0, end).toString('latin1'), localHost, peer);
    const body = c.body.kind === 'chunked' ? -1 : c.body.kind === 'length' ? c.body.bytes : 0;
    return { head: Buffer.from(c.head, 'latin1'), body, last: c.last };
  } catch (e) {
    if (e instanceof Refusal) return refusalBytes(e);
    throw e;
  }
}

/** true when buf[0, end) holds a LF not preceded by CR */
function bareLf(buf: Buffer, end: number): boolean {
  for (let i = buf.indexOf(10); i >= 0 && i < end; i = buf.indexOf(10, i + 1)) {
    if (i === 0 || buf[i - 1] !== 13) return true;
  }
  return false;
}

// tchar of RFC 9110 (header names), as a byte table
const TCHAR = new Uint8Array(256);
const TCHARS = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
for (const c of TCHARS) TCHAR[c.charCodeAt(0)] = 1;
const CR = 13;
const LF = 10;
const SP = 32;
const HT = 9;
const HTTP11 = Buffer.from(' HTTP/1.1\r\n');

/** buf[at, at + name.length) is `name` (lower case ASCII letters and '-') in any case */
function nameIs(buf: Buffer, at: number, len: number, name: string): boolean {
  if (len !== name.length) return false;
  for (let i = 0; i < len; i++) if ((buf[at + i]! | 0x20) !== name.charCodeAt(i)) return false;
  return true;
}

/**
 * The common case in one pass over the bytes, with no strings: an HTTP/1.1 request in origin form
 * whose head `buf[0, end)` is plain ASCII with CRLF line ends, an upper-case method, one Host, at
 * most MAX_HEADERS header lines, no Transfer-Encoding and no X-Loom-Peer, and at most one
 * Content-Length of 1-15 digits. Such a head passes on unchanged but for the X-Loom-Peer line, as
 * checkHead would pass it. Returns its body length, or -1 for anything else: checkHead then
 * decides (and words any refusal).
 */
export function plainHeadBodyLength(buf: Buffer, end: number): number {
  let i = 0;
  // method: [A-Z][A-Z-]*
  let b = buf[0]!;
  if (b < 65 || b > 90) return -1;
  for (i = 1; i < end; i++) {
    b = buf[i]!;
    if (b === SP) break;
    if ((b < 65 || b > 90) && b !== 45) return -1;
  }
  // target: '/' then visible ASCII
  if (buf[++i] !== 47) return -1;
  for (; i < end; i++) {
    b = buf[i]!;
    if (b === SP) break;
    if (b < 0x21 || b > 0x7e) return -1;
  }
  if (i + HTTP11.length > end + 2 || buf.compare(HTTP11, 0, HTTP11.length, i, i + HTTP11.length) !== 0) return -1;
  i += HTTP11.length;
  let lines = 0;
  let hosts = 0;
  let length = -1;
  // header lines; the last ends at `end` (its CRLF is the first half of the blank line's)
  while (i < end + 2) {
    if (++lines > MAX_HEADERS) return -1;
    const start = i;
    while (i < end && TCHAR[buf[i]!] === 1) i++;
    const nameLen = i - start;
    if (nameLen === 0 || buf[i] !== 58) return -1; // ':'
    i++;
    while (buf[i] === SP || buf[i] === HT) i++;
    const valueStart = i;
    for (; i < end; i++) {
      b = buf[i]!;
      if (b === CR) break;
      if ((b < 0x20 && b !== HT) || b > 0x7e) return -1;
    }
    if (buf[i] !== CR || buf[i + 1] !== LF) return -1;
    const c = buf[start]! | 0x20;
    if (c === 104 && nameIs(buf, start, nameLen, 'host')) hosts++;
    else if (c === 116 && nameIs(buf, start, nameLen, 'transfer-encoding')) return -1;
    else if (c === 120 && nameIs(buf, start, nameLen, 'x-loom-peer')) return -1;
    else if (c === 99 && nameIs(buf, start, nameLen, 'content-length')) {
      if (length >= 0) return -1;
      let v = valueStart;
      let n = 0;
      for (; v < i && buf[v]! >= 48 && buf[v]! <= 57; v++) n = n * 10 + buf[v]! - 48;
      const digits = v - valueStart;
      while (v < i && (buf[v] === SP || buf[v] === HT)) v++;
      if (digits === 0 || digits > 15 || v !== i) return -1;
      length = n;
    }
    i += 2;
  }
  return hosts === 1 ? Math.max(length, 0) : -1;
}

const CRLF2 = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');

/** One client connection: parses its request stream and passes it on to `upstream`. */
class GuardedConnection {
  private buf: Buffer = Buffer.alloc(0);
  private state: 'head' | 'length' | 'chunk-size' | 'chunk-data' | 'trailer' | 'closed' = 'head';
  private left = 0;
  /** HTTP/1.0: nothing after this request is read */
  private lastRequest = false;

  /** the connection to uWS; null between requests after uWS closed it */
  private up: net.Socket | null = null;
  /** uWS has sent bytes since the last request was passed on */
  private answered = true;
  /** the client's address, for X-Loom-Peer */
  private readonly peer: string;
  /** `X-Loom-Peer: <peer>` and the head's final blank line, for plain heads */
  private readonly peerLine: Buffer;

  constructor(
    private readonly client: net.Socket, private readonly upstreamPath: string, private readonly localHost: string,
    private readonly shared: { closing: boolean; open: Set<GuardedConnection> },
  ) {
    shared.open.add(this);
    client.on('close', () => shared.open.delete(this));
    this.peer = (client.remoteAddress ?? '').replace(/^::ffff:(?=\d+\.)/, '');
    this.peerLine = Buffer.from(`X-Loom-Peer: ${this.peer}\r\n\r\n`, 'latin1');
    client.on('data', (d: Buffer) => this.feed(d));
    client.on('close', () => this.up?.destroy());
    client.on('error', () => this.up?.destroy());
    client.on('timeout', () => client.destroy());
    this.upstream();
  }

  /** the connection to uWS, opened when there is none */
  private upstream(): net.Socket {
    if (this.up) return this.up;
    const client = this.client;
    const up = net.connect({ path: this.upstreamPath });
    this.up = up;
    client.setTimeout(0);
    up.on('data', (d: Buffer) => {
      this.answered = true;
      if (!client.destroyed) client.write(d);
    });
    up.on('error', () => {}); // 'close' follows, with hadError
    up.on('close', (hadError) => {
      if (this.up !== up) return;
      this.up = null;
      if (client.destroyed) return;
      // uWS closes some keep-alive connections after a response without saying so in it (after a
      // 413, say), while the client may already be sending its next request: when the last request
      // was answered and no new one was passed on, the client's connection stays, the next request
      // gets a new connection to uWS, and an idle client is closed after uWS's own idle time.
      // Otherwise (a request cut off or not answered) the client's connection ends too.
      const between = this.state === 'head' && this.answered && !this.lastRequest;
      if (between && this.shared.closing) client.end(); // shutting down: no next request on this connection
      else if (between) client.setTimeout(IDLE_MS);
      else if (hadError) client.destroy();
      else client.end();
    });
    return up;
  }

  /** the guard is closing: a connection between requests with no connection to uWS ends now; one with a
   * request in flight ends when uWS closes its side after answering (the server drains, then closes uWS) */
  shutdown(): void {
    if (!this.up && this.state === 'head' && !this.client.destroyed) this.client.end();
  }

  private refuse(answer: Buffer): void {
    this.state = 'closed';
    this.up?.destroy();
    this.client.end(answer);
  }

  private feed(d: Buffer): void {
    if (this.state === 'closed') return;
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    while (this.buf.length && (this.state as string) !== 'closed') {
      if (this.state === 'head' && this.lastRequest) { this.state = 'closed'; return; }
      if (this.state === 'head') {
        const end = this.buf.indexOf(CRLF2);
        if (end >= 0 && end <= MAX_HEAD_BYTES) {
          // the common case: checked in one pass and passed on with the client's address added
          const bodyBytes = plainHeadBodyLength(this.buf, end);
          if (bodyBytes >= 0) {
            this.answered = false;
            this.upstream().write(Buffer.concat([this.buf.subarray(0, end + 2), this.peerLine]));
            this.buf = this.buf.subarray(end + 4);
            if (bodyBytes > 0) { this.state = 'length'; this.left = bodyBytes; }
            continue;
          }
        }
        const d = examineHead(this.buf, end, this.localHost, this.peer);
        if (d === null) return;
        if (Buffer.isBuffer(d)) return this.refuse(d);
        this.answered = false;
        this.upstream().write(d.head);
        this.buf = this.buf.subarray(end + 4);
        this.lastRequest = d.last;
        if (d.body > 0) { this.state = 'length'; this.left = d.body; }
        else if (d.body < 0) this.state = 'chunk-size';
      } else if (this.state === 'length' || this.state === 'chunk-data') {
        const n = Math.min(this.left, this.buf.length);
        this.upstream().write(this.buf.subarray(0, n));
        this.buf = this.buf.subarray(n);
        this.left -= n;
        if (this.left === 0) this.state = this.state === 'length' ? 'head' : 'chunk-size';
      } else {
        // chunk-size line or a trailer line: passed on whole
        const end = this.buf.indexOf(CRLF);
        if (end < 0) {
          if (this.buf.length > MAX_HEAD_BYTES) return this.refuse(CHUNK_BODY_REFUSAL);
          return;
        }
        const line = this.buf.subarray(0, end).toString('latin1');
        this.upstream().write(this.buf.subarray(0, end + 2));
        this.buf = this.buf.subarray(end + 2);
        if (this.state === 'trailer') { if (line === '') this.state = 'head'; continue; }
        const size = /^([0-9a-fA-F]{1,8})(;.*)?$/.exec(line);
        if (!size) return this.refuse(CHUNK_SIZE_REFUSAL);
        const n = parseInt(size[1]!, 16);
        if (n === 0) this.state = 'trailer';
        else { this.state = 'chunk-data'; this.left = n + 2; }
      }
    }
  }
}

export interface Guard { port: number; close(): void }

/** Listens on host:port and passes checked requests to uWS listening on the unix socket `upstreamPath`. */
export function startGuard(host: string, port: number, upstreamPath: string): Promise<Guard> {
  const shared = { closing: false, open: new Set<GuardedConnection>() };
  const server = net.createServer({ noDelay: true }, (client) => {
    const local = `${host.includes(':') ? `[${host}]` : host}:${(server.address() as net.AddressInfo).port}`;
    new GuardedConnection(client, upstreamPath, local, shared);
  });
  const close = () => {
    shared.closing = true;
    server.close();
    for (const c of shared.open) c.shutdown();
  };
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      resolve({ port: (server.address() as net.AddressInfo).port, close });
    });
  });
}

// ---- the native guard: the same checks inside uWS's own reads (native/net/http_guard.cc) -------------

/** local ports served by the native guard, with the Host an HTTP/1.0 request without one gets */
const nativePorts = new Map<number, string>();
let nativeInstalled: string | null | undefined;
let nativeAddon: Record<string, (...args: unknown[]) => unknown> | null = null;

/**
 * Installs the native guard in this process (once; uWS must be loaded): null when it is in place,
 * else why not (then the proxy above serves). It checks uWS's reads of the connections accepted on
 * the ports given to guardPort, with plainHeadBodyLength's scan in C++ and examineHead for the rest.
 */
export async function installNativeGuard(): Promise<string | null> {
  if (nativeInstalled !== undefined) return nativeInstalled;
  if (!isMainThread) return (nativeInstalled = 'not on the main thread (uWS and the guard share its loop)');
  try {
    const { addon } = await import('../src/native/addon.ts');
    const examine = (buf: Buffer, end: number, port: number) =>
      examineHead(buf, end, nativePorts.get(port) ?? `127.0.0.1:${port}`);
    const error = refusalBytes(new Refusal(400, 'Malformed request'));
    nativeInstalled = addon.httpGuardInstall(
      examine, MAX_HEADERS, MAX_HEAD_BYTES, CHUNK_SIZE_REFUSAL, CHUNK_BODY_REFUSAL, error,
    ) as string | null;
    if (nativeInstalled === null) nativeAddon = addon;
  } catch (e) {
    nativeInstalled = `native addon unavailable: ${(e as Error).message}`;
  }
  return nativeInstalled;
}

/**
 * The native guard's number for the connection of the request being handled (0: not a guarded
 * connection); see http_guard_connection in native/net/http_guard.h. Null when it is not installed.
 */
export function guardConnection(): (() => number) | null {
  return nativeAddon ? (nativeAddon.httpGuardConnection as () => number) : null;
}

/**
 * The native guard (installed) checks the connections uWS accepts on `port` from now on (at once:
 * call it before the event loop turns, so before the first accept); the function returned stops it.
 */
export function guardPort(port: number, localHost: string): () => void {
  const addon = nativeAddon;
  if (!addon) throw new Error('the native HTTP guard is not installed');
  nativePorts.set(port, localHost);
  addon.httpGuardPortAdd!(port);
  return () => { addon.httpGuardPortRemove!(port); nativePorts.delete(port); };
}
