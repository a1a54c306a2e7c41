// pino logger. Requests are logged by route/status/ids only: no headers, bodies or query strings,
// and the redact list covers every secret-bearing field name in case one is ever passed.
import { pino, type Logger } from 'pino';

export const REDACT_PATHS = [
  'password', '*.password', 'secret_key', '*.secret_key', 'token', '*.token', 'csrf_token', '*.csrf_token',
  'headers.authorization', 'headers["x-api-key"]', 'headers.cookie', '*.headers.authorization', '*.headers["x-api-key"]', '*.headers.cookie',
  'api_key', '*.api_key', 'key', '*.key',
];

export function createLogger(opts: { level?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  const level = opts.level ?? process.env.LOOM_LOG_LEVEL ?? 'info';
  const o = { level, base: { service: 'loom' }, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  return opts.destination ? pino(o, opts.destination as pino.DestinationStream) : pino(o);
}
export type { Logger };

/**
 * The access log: one line per request, `{"level":30,"time":…,"service":"loom","method","route",
 * "status","ms"[,"team_id","key_id"],"msg":"request"}` — the line pino writes for `log.info({...}, 'request')`,
 * into the logger's own destination. The fields are fixed (a route pattern, numbers, ids), so the line is built
 * from its pieces instead of going through pino's generic serializer and redaction, which cost about as much as the
 * rest of a GET /health. Each line's bytes go straight into one batch buffer in three copies: the route's line
 * start up to its status (encoded once a millisecond per route, with the time), `,"ms":` and the caller's ids with
 * the line's end (encoded once per key), the numbers written as digits between them, so a line allocates nothing
 * else. (Built as strings, each batch was a rope of thousands of small strings scattered through the young heap,
 * which the destination flattened at 0.8 us of server CPU per line under load.) Lines are written in batches, at
 * most FLUSH_MS apart or FLUSH_BYTES long (a write per request cost as much again; pino's asynchronous sonic-boom
 * costs some 30-60 us of CPU per write, little more for 64 KiB than for 16 KiB); `flush()` writes what is pending
 * (the server calls it when it closes), so only a crash can lose the last FLUSH_MS of access lines. Other log lines
 * are pino's, written at once.
 */
const FLUSH_MS = 25;
const FLUSH_BYTES = 64 * 1024;

/** a non-negative integer's decimal digits, written at buf[off]; returns the offset after them */
function writeUint(buf: Uint8Array, off: number, n: number): number {
  const start = off;
  do {
    const q = Math.floor(n / 10);
    buf[off++] = 48 + n - q * 10;
    n = q;
  } while (n > 0);
  for (let a = start, b = off - 1; a < b; a++, b--) { const c = buf[a]!; buf[a] = buf[b]!; buf[b] = c; }
  return off;
}

/**
 * `hundredths / 100` as JSON.stringify writes that number (1.74, 1.7, 2, 0.05), written at buf[off] without
 * converting a double to a string (V8's slow path): integers only. Returns the offset after it.
 */
function writeHundredths(buf: Uint8Array, off: number, hundredths: number): number {
  const int = Math.floor(hundredths / 100);
  const frac = hundredths - int * 100;
  off = writeUint(buf, off, int);
  if (frac === 0) return off;
  buf[off++] = 46; // '.'
  const tens = Math.floor(frac / 10);
  buf[off++] = 48 + tens;
  if (frac !== tens * 10) buf[off++] = 48 + frac - tens * 10;
  return off;
}

const scratch = Buffer.allocUnsafe(32);
/** `hundredths / 100` as JSON.stringify writes it: the access log's duration as text */
export function hundredthsJson(hundredths: number): string {
  return scratch.toString('latin1', 0, writeHundredths(scratch, 0, hundredths));
}

const utf8 = (s: string): Uint8Array => Buffer.from(s, 'utf8');
const MS_KEY = utf8(',"ms":');
const LINE_END = ',"msg":"request"}\n';
const NOTHING = new Uint8Array(0);
/** the end of a line without ids */
const END_NO_IDS = utf8(LINE_END);

/**
 * A route's constant access-log fields (`,"method":…,"route":…`) and, encoded once per millisecond, the
 * bytes of its lines up to the status: `{"level":30,"time":…,"service":"loom"` + fields + `,"status":`
 */
export interface AccessFields { readonly text: string; time: number; prefix: Uint8Array }

export function createAccessLog(log: Logger) {
  const stream = (log as unknown as Record<symbol, { write(s: string): unknown }>)[pino.symbols.streamSym]!;
  const bindings = (log as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
  // room for a batch and the longest line that can follow it (ids are ids; routes are route patterns)
  const buf = Buffer.allocUnsafe(FLUSH_BYTES + 16 * 1024);
  let off = 0;
  let timer: NodeJS.Timeout | null = null;
  let lastTeam: string | null | undefined;
  let lastKey: string | null | undefined;
  // the ids' JSON and the line's end, kept for the next line of the same key (most lines repeat it)
  let lastTail: Uint8Array = END_NO_IDS;
  function flush(): void {
    if (timer) { clearTimeout(timer); timer = null; }
    if (off === 0) return;
    const s = buf.toString('utf8', 0, off);
    off = 0;
    stream.write(s);
  }
  // three copies a line (the prefix, `,"ms":`, the ids and end): each TypedArray.set call costs some 50 ns
  function put(b: Uint8Array): void {
    buf.set(b, off);
    off += b.length;
  }
  return {
    flush,
    /** the constant part of a route's lines */
    routeFields: (method: string, route: string): AccessFields =>
      ({ text: `,"method":${JSON.stringify(method)},"route":${JSON.stringify(route)}`, time: -1, prefix: NOTHING }),
    /** one request's line; `ms100`: its duration in hundredths of a millisecond (a non-negative integer) */
    line(fields: AccessFields, status: number, ms100: number, teamId?: string | null, keyId?: string | null): void {
      if (!log.isLevelEnabled('info')) return;
      let tail = END_NO_IDS;
      if (teamId || keyId) {
        if (teamId !== lastTeam || keyId !== lastKey) {
          lastTeam = teamId;
          lastKey = keyId;
          lastTail = utf8((teamId ? `,"team_id":${JSON.stringify(teamId)}` : '')
            + (keyId ? `,"key_id":${JSON.stringify(keyId)}` : '') + LINE_END);
        }
        tail = lastTail;
      }
      const time = Date.now();
      if (fields.time !== time) {
        fields.time = time;
        fields.prefix = utf8(`{"level":30,"time":${time}${bindings}${fields.text},"status":`);
      }
      const prefix = fields.prefix;
      const need = prefix.length + tail.length + 48;
      if (off + need > buf.length) flush();
      if (need > buf.length) { // no line is this long: written on its own rather than refused
        stream.write(`${Buffer.from(prefix)}${status},"ms":${hundredthsJson(ms100)}${Buffer.from(tail)}`);
        return;
      }
      put(prefix);
      off = writeUint(buf, off, status);
      put(MS_KEY);
      off = writeHundredths(buf, off, ms100);
      put(tail);
      if (off >= FLUSH_BYTES) flush();
      else if (timer === null) { timer = setTimeout(flush, FLUSH_MS); timer.unref(); }
    },
  };
}
export type AccessLog = ReturnType<typeof createAccessLog>;
