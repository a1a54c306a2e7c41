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
 * "status","ms"[,"team_id","key_id"],"msg":"request"}` — the line pino writes for
 * `log.info({...}, 'request')`, into the logger's own destination. The fields are fixed (a route
 * pattern, numbers, ids), so the line is built from strings instead of going through pino's
 * generic serializer and redaction, which cost about as much as the rest of a GET /health. Lines
 * are written in batches, at most FLUSH_MS apart or FLUSH_BYTES long (a write per request cost as
 * much again; pino's asynchronous sonic-boom costs some 30-60 us of CPU per write, little more for
 * 64 KiB than for 16 KiB); `flush()` writes what is pending (the server calls it when it closes),
 * so only a crash can lose the last FLUSH_MS of access lines. Other log lines are pino's, written
 * at once.
 */
const FLUSH_MS = 25;
const FLUSH_BYTES = 64 * 1024;

/**
 * `hundredths / 100` as JSON.stringify writes that number (1.74, 1.7, 2, 0.05) without converting a
 * double to a string (V8's slow path): integers only
 */
export function hundredthsJson(hundredths: number): string {
  const int = Math.floor(hundredths / 100);
  const frac = hundredths - int * 100;
  if (frac === 0) return `${int}`;
  if (frac % 10 === 0) return `${int}.${frac / 10}`;
  return frac < 10 ? `${int}.0${frac}` : `${int}.${frac}`;
}

export function createAccessLog(log: Logger) {
  const stream = (log as unknown as Record<symbol, { write(s: string): unknown }>)[pino.symbols.streamSym]!;
  const bindings = (log as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
  let pending = '';
  let timer: NodeJS.Timeout | null = null;
  let lastTeam: string | null | undefined;
  let lastKey: string | null | undefined;
  let lastIds = '';
  // the start of a line up to its time, kept while the time (a millisecond count) is the same: a
  // 13-digit number is a double to V8, and its text V8's slow number-to-string path
  let lastTime = -1;
  let lastHead = '';
  function flush(): void {
    if (timer) { clearTimeout(timer); timer = null; }
    if (pending === '') return;
    const s = pending;
    pending = '';
    stream.write(s);
  }
  return {
    flush,
    /** the constant part of a route's lines */
    routeFields: (method: string, route: string): string =>
      `,"method":${JSON.stringify(method)},"route":${JSON.stringify(route)}`,
    /** one request's line; `ms100`: its duration in hundredths of a millisecond (an integer) */
    line(routeFields: string, status: number, ms100: number, teamId?: string | null, keyId?: string | null): void {
      if (!log.isLevelEnabled('info')) return;
      let ids = '';
      if (teamId || keyId) {
        // the ids' JSON, kept for the next line of the same key (most lines repeat the last one)
        if (teamId !== lastTeam || keyId !== lastKey) {
          lastTeam = teamId;
          lastKey = keyId;
          lastIds = (teamId ? `,"team_id":${JSON.stringify(teamId)}` : '')
            + (keyId ? `,"key_id":${JSON.stringify(keyId)}` : '');
        }
        ids = lastIds;
      }
      const ms = hundredthsJson(ms100);
      const time = Date.now();
      if (time !== lastTime) { lastTime = time; lastHead = `{"level":30,"time":${time}${bindings}`; }
      pending += `${lastHead}${routeFields},"status":${status},"ms":${ms}${ids},"msg":"request"}\n`;
      if (pending.length >= FLUSH_BYTES) flush();
      else if (timer === null) { timer = setTimeout(flush, FLUSH_MS); timer.unref(); }
    },
  };
}
export type AccessLog = ReturnType<typeof createAccessLog>;
