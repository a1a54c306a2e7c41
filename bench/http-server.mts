// The Loom side of `npm run bench -- http`: the real server (createServices + createServer, the
// local runtime over an empty models folder, the default logger at LOOM_LOG_LEVEL or info) on a
// temp store, with one user and API key. Rate limits keep their full pipeline but get budgets no
// run can exhaust (the spec's 100,000 per minute per IP would refuse a single loopback client
// within a second). With LOOM_REDIS_URL set they are counted in that Redis. Prints {"port", "key"}
// on stderr; serves until killed.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from '../server/index.ts';
import { createLogger } from '../server/log.ts';
import { DEFAULT_RATE_LIMITS } from '../src/service/config.ts';
import { createServices } from '../src/service/index.ts';
import { createLocalRuntime } from '../src/service/runtime-local.ts';

const dataDir = mkdtempSync(join(tmpdir(), 'loom-bench-http-'));
const modelsDir = join(dataDir, 'models');
// 1e9: a small integer to V8 (as real limits are; 1e12 made every X-RateLimit-* value a
// double-to-string conversion) and more requests than any run makes
const huge = 1e9;
const rateLimits = {
  edge: { ...DEFAULT_RATE_LIMITS.edge, points: huge },
  default: DEFAULT_RATE_LIMITS.default.map((r) => ({ ...r, points: huge })),
  endpoints: DEFAULT_RATE_LIMITS.endpoints.map((r) => ({ ...r, points: huge })),
};
const log = createLogger();
const runtime = createLocalRuntime({ modelsDir, maxLoaded: 1, retryAfterS: 5 });
// LOOM_REDIS_URL: the same limits counted in Redis (the shared limiter's cost per request)
const redisUrl = process.env.LOOM_REDIS_URL || null;
const services = await createServices({ config: { dataDir, modelsDir, rateLimits, redisUrl }, runtime, log });
const { user } = await services.auth.createUser({ email: 'bench@example.com', password: 'bench-password-1' });
const { secret_key: key } = await services.auth.createKeyForUser(user.id, 'bench');
const server = await createServer({ services, log });
process.stderr.write(`${JSON.stringify({ port: server.port, key })}\n`);
process.on('SIGTERM', () => process.exit(0));
