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
