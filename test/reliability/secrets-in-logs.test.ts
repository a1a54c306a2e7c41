// No secret in the logs at any level: a server whose services and routes log at `trace` into a
// buffer goes through login (good and bad passwords), key creation, use, revocation, a key wrongly
// sent in the query string, session calls with CSRF tokens, a presigned upload, a signed weights
// download (and a forged one), failing and crashing requests. None of the passwords, API key
// secrets, session tokens, CSRF tokens or URL signatures appears anywhere in what was logged.
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';
import { createServices } from '../../src/service/index.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call } from '../service/helpers.ts';
import { nerLine, poll, uploadDataset } from '../service/customization-helpers.ts';
import { ENCODER_ID, makeDataDir, OPEN_RATE_LIMITS, removeDir } from './helpers.ts';

let logged = '';
const sink = new Writable({
  write(chunk, _enc, cb) {
    logged += chunk.toString();
    cb();
  },
});
const log = createLogger({ level: 'trace', destination: sink });
const home = makeDataDir('loom-rel-log-');
const dataDir = mkdtempSync(join(tmpdir(), 'loom-rel-logdata-'));
const services = await createServices({
  runtime: createLocalRuntime({ modelsDir: `${home}/models` }),
  log,
  config: { dataDir, modelsDir: `${home}/models`, workerThreads: 1, rateLimits: OPEN_RATE_LIMITS },
});
const server = await createServer({ services, log });
const url = server.url;
t.teardown(async () => {
  await server.close({ timeoutMs: 2000 });
  removeDir(home);
  removeDir(dataDir);
});

t.test('secrets never reach the log at trace level', async (t) => {
  const secrets: Record<string, string> = {};
  const password = 'Sup3r-Secret-Passw0rd!';
  secrets.password = password;
  const email = `logs-${Date.now()}@example.com`;
  const { team } = await services.auth.createUser({ email, password });
  await services.billing.grant(team.id, 100);
  t.equal(
    (await call(url, 'POST', '/auth/login', { body: { email, password: password + 'x' } })).status,
    401,
    'bad password refused',
  );
  secrets.wrongPassword = password + 'x';
  const login = await call(url, 'POST', '/auth/login', { body: { email, password } });
  t.equal(login.status, 200);
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0];
  secrets.session = cookie.split('=')[1];
  secrets.csrf = login.body.csrf_token;
  const s = { headers: { Cookie: cookie, 'X-CSRF-Token': secrets.csrf } };
  t.equal(
    (await call(url, 'GET', '/auth/session', { headers: { Cookie: cookie, 'X-CSRF-Token': secrets.csrf } })).status,
    200,
  );
  const k1 = (await call(url, 'POST', '/create-api-key', { ...s, body: { name: 'one' } })).body;
  const k2 = (await call(url, 'POST', '/create-api-key', { ...s, body: { name: 'two' } })).body;
  secrets.key1 = k1.secret_key;
  secrets.key2 = k2.secret_key;
  t.equal((await call(url, 'POST', '/create-api-key', { key: k1.secret_key, body: { name: 'chained' } })).status, 403);
  t.equal(
    (
      await call(url, 'POST', '/create-api-key', {
        headers: { Cookie: cookie, 'X-CSRF-Token': 'forged-' + secrets.csrf },
        body: { name: 'x' },
      })
    ).status,
    403,
    'bad CSRF refused',
  );
  t.equal((await call(url, 'GET', `/projects?api_key=${k1.secret_key}`)).status, 400, 'key in the query refused');
  t.equal(
    (
      await call(url, 'POST', '/inference', {
        key: k1.secret_key,
        body: { model_id: ENCODER_ID, text: 'Alice lives in Paris .', schema: ['person'] },
      })
    ).status,
    200,
  );
  t.equal(
    (await call(url, 'GET', '/v1/models', { headers: { Authorization: `Bearer ${k1.secret_key}` } })).status,
    200,
  );
  t.equal((await call(url, 'GET', '/projects', { key: k1.secret_key + 'x' })).status, 401);
  secrets.badKey = k1.secret_key + 'x';
  // a request that ends in the unhandled-error path (logged with its stack) carrying the key
  await call(url, 'GET', '/felix/datasets/%ZZ', { key: k1.secret_key });
  // presigned upload and signed download
  const data =
    Array.from({ length: 16 }, (_, i) =>
      nerLine(`Bob lives in Oslo number ${i} .`, [
        ['Bob', 'person'],
        ['Oslo', 'city'],
      ]),
    ).join('\n') + '\n';
  const up = await call(url, 'POST', '/felix/datasets/upload/url', {
    key: k1.secret_key,
    body: { dataset_name: 'probe', dataset_type: 'ner', filename: 'p.jsonl' },
  });
  secrets.uploadSignature = new URL(up.body.upload_url).searchParams.get('signature')!;
  // a first character other than the real one (the signature may itself start with 'x')
  const forged = (secrets.uploadSignature[0] === 'x' ? 'y' : 'x') + secrets.uploadSignature.slice(1);
  t.equal(
    (
      await fetch(up.body.upload_url.replace(secrets.uploadSignature, forged), {
        method: 'PUT',
        body: 'x',
      })
    ).status,
    403,
    'forged upload signature refused',
  );
  t.equal((await uploadDataset(url, k1.secret_key, 'people', 'ner', 'people.jsonl', data)).body.status, 'ready');
  const job = await call(url, 'POST', '/felix/training-jobs', {
    key: k1.secret_key,
    body: {
      base_model: 'loom/gliner2-init-tiny',
      datasets: [{ name: 'people' }],
      model_name: 'm',
      training_type: 'full',
      nr_epochs: 1,
      max_steps: 1,
      batch_size: 8,
    },
  });
  const done = await poll(
    () => call(url, 'GET', `/felix/training-jobs/${job.body.id}`, { key: k1.secret_key }),
    (r) => ['complete', 'failed'].includes(r.body.status),
    120_000,
    200,
  );
  t.equal(done.body.status, 'complete');
  const dl = await call(url, 'GET', `/felix/training-jobs/${job.body.id}/download`, { key: k1.secret_key });
  secrets.downloadSignature = new URL(dl.body.download_url).searchParams.get('signature')!;
  t.equal((await fetch(dl.body.download_url)).status, 200);
  // revoke, use the revoked key, log out
  t.equal((await call(url, 'DELETE', '/delete-api-key', { key: k1.secret_key, body: { key_id: k2.id } })).status, 200);
  t.equal((await call(url, 'GET', '/projects', { key: k2.secret_key })).status, 401);
  t.equal((await call(url, 'POST', '/auth/logout', s)).status, 200);

  t.ok(logged.length > 1000, `the server logged (${logged.length} bytes, ${logged.split('\n').length} lines)`);
  t.match(logged, /"level":30/, 'request lines were logged');
  for (const [what, secret] of Object.entries(secrets)) {
    t.ok(secret && secret.length >= 8, `${what} is a real secret`);
    t.notOk(logged.includes(secret), `the ${what} is not in the log`);
    // nor a distinctive fragment of it (a secret logged truncated or in another encoding)
    t.notOk(logged.includes(secret.slice(-16)), `no tail of the ${what} in the log`);
  }
});
