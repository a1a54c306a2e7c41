// Many adapters, one base: decoder LoRA jobs of one base run on ONE loaded base (src/service/runtime-local.ts), in
// the same batches; adapters load on first use and leave on their own (LRU over LOOM_ADAPTER_MEMORY, never while a
// generation holds them); fine-tuned models are listed for their team only (GET /base-models, GET /v1/models) and
// callable by job id on /inference, /v1/chat/completions and /v1/messages.
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { generateAll, type ModelRef, type ModelRuntime } from '../../src/service/runtime.ts';
import { writeRandomLora } from '../decoder/random-lora.ts';
import { call, makeUser, startServer } from './helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const decDir = join(shared, 'models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-mlora-'));
const modelsDir = join(tmp, 'models');
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
mkdirSync(modelsDir);
symlinkSync(decDir, join(modelsDir, 'tinystories-656k'));
const BASE = 'tinystories-656k';
const cfg = JSON.parse(readFileSync(join(decDir, 'config.json'), 'utf8'));
const adapterDir = (n: number) => writeRandomLora(join(tmp, `adapter-${n}`), cfg, { r: 8, seed: 100 + n, std: 0.15 });
const refOf = (id: string, dir: string): ModelRef =>
  ({ id, kind: 'decoder', dir, base_model: BASE, weights: 'adapter' });
const PROMPT = 'Once upon a time, there was a little girl named Lily. She';
const greedy = { prompt: PROMPT, max_tokens: 20, temperature: 0, stop_at_eos: false };
const gen = async (rt: ModelRuntime, ref: ModelRef) => (await generateAll(rt, ref, greedy)).text;
const baseMem = (rt: ModelRuntime) => rt.stats().memory!.filter((m) => m.id === BASE);

const dirs = [adapterDir(1), adapterDir(2)];
const refs = [refOf('job-a1', dirs[0]), refOf('job-a2', dirs[1])];

t.test('two adapters in one batch give each one\'s tokens alone, on one loaded base', async (t) => {
  const rt = createLocalRuntime({ modelsDir });
  t.teardown(() => rt.close());
  const base = await gen(rt, { id: BASE, kind: 'decoder' });
  const alone = [await gen(rt, refs[0]), await gen(rt, refs[1])];
  t.not(alone[0], base, 'adapter 1 changes the continuation');
  t.not(alone[1], base, 'adapter 2 changes the continuation');
  t.not(alone[0], alone[1], 'the two adapters differ');
  const steps0 = baseMem(rt)[0].steps!;
  const together = await Promise.all([gen(rt, refs[0]), gen(rt, refs[1]), gen(rt, { id: BASE, kind: 'decoder' })]);
  t.same(together, [...alone, base], 'the same greedy tokens served together as alone');
  const steps = baseMem(rt)[0].steps! - steps0;
  // 3 sequences × 20 tokens each: one step per token when they share the batches (cached prompts: no prefill)
  t.ok(steps <= greedy.max_tokens + 3, `three generations ran in ${steps} batched steps (one after another: ` +
    `${3 * greedy.max_tokens})`);
  const st = rt.stats();
  t.same(st.loaded, [BASE], 'the base is loaded once');
  const m = baseMem(rt);
  t.equal(m.length, 1);
  t.same(m[0].adapters!.map((a) => a.id).sort(), ['job-a1', 'job-a2']);
  t.ok(m[0].weight_bytes > 0 && m[0].kv_bytes > 0);
  t.equal(m[0].adapter_bytes, m[0].adapters!.reduce((n, a) => n + a.bytes, 0));
  // r·(in + out) f32 values per module, 7 modules, 2 layers
  const D = cfg.hidden_size, F = cfg.intermediate_size, Nkv = (cfg.num_key_value_heads * D) / cfg.num_attention_heads;
  const perLayer = 8 * ((D + D) * 2 + (D + Nkv) * 2 + (D + F) * 3);
  t.equal(m[0].adapters![0].bytes, perLayer * cfg.num_hidden_layers * 4, 'adapter bytes');
  t.ok(m[0].adapters!.every((a) => a.in_use === 0), 'nothing holds them once done');
});

t.test('a tiny adapter budget: LRU eviction reloads transparently; adapters in use are never evicted', async (t) => {
  const probe = createLocalRuntime({ modelsDir });
  const want = [await gen(probe, refs[0]), await gen(probe, refs[1])];
  const one = baseMem(probe)[0].adapters![0].bytes;
  await probe.close();
  const rt = createLocalRuntime({ modelsDir, adapterMemory: one + 1 });
  t.teardown(() => rt.close());
  const loadedAdapters = () => baseMem(rt)[0].adapters!.map((a) => a.id);
  t.equal(await gen(rt, refs[0]), want[0]);
  t.same(loadedAdapters(), ['job-a1']);
  t.equal(await gen(rt, refs[1]), want[1]);
  t.same(loadedAdapters(), ['job-a2'], 'the least recently used adapter left for the new one');
  t.equal(await gen(rt, refs[0]), want[0], 'reloaded on its next call, same tokens');
  t.same(loadedAdapters(), ['job-a1']);
  // both at once: the budget holds one, but neither is evicted while its generation runs
  const both = await Promise.all([gen(rt, refs[0]), gen(rt, refs[1]), gen(rt, refs[0])]);
  t.same(both, [want[0], want[1], want[0]], 'concurrent generations over budget all finish with their adapter');
  t.equal(loadedAdapters().length, 1, 'back within the budget once they are done');
  t.same(rt.stats().loaded, [BASE]);
  // unload (a deleted job): gone now, loads again on a later call
  rt.unload!(refs[loadedAdapters()[0] === 'job-a1' ? 0 : 1]);
  t.same(loadedAdapters(), []);
});

t.test('a bad LOOM_ADAPTER_MEMORY is a clear error', async (t) => {
  t.throws(() => createLocalRuntime({ modelsDir, adapterMemory: 'lots' }), /invalid memory size "lots"/);
});

t.test('fine-tuned models through HTTP: listed for their team only, callable by id, unloaded on delete', async (t) => {
  const runtime = createLocalRuntime({ modelsDir });
  const ts = await startServer({ runtime, config: { modelsDir } });
  t.teardown(() => ts.close());
  const a = await makeUser(ts, { credits: 1000 });
  const b = await makeUser(ts, { credits: 1000 });
  const now = new Date().toISOString();
  const job = (id: string, team: string, dir: string, status = 'complete') => ({
    id, team_id: team, status, base_model: BASE, model_name: `story-${id.slice(0, 8)}`, task_type: 'decoder',
    output_dir: dir, weights_dir: dir, training_type: 'lora', training_algorithm: 'sft', project_id: null,
    created_at: now, updated_at: now, completed_at: now, datasets: [], configuration: {}, restarts: 0,
    base: { requested: BASE, source: 'catalog', catalog_id: BASE, dir: decDir, init_adapter: null },
    model_ref: { id, kind: 'decoder', dir, base_model: BASE, weights: 'adapter', base_dir: decDir },
  });
  const uuid = (): string => crypto.randomUUID();
  const ids = { a1: uuid(), a2: uuid(), b1: uuid(), run: uuid() };
  await ts.services.store.tx(async (t) => {
    t.trainingJobs.put(job(ids.a1, a.team_id, dirs[0]) as never);
    t.trainingJobs.put(job(ids.a2, a.team_id, dirs[1], 'deployed') as never);
    t.trainingJobs.put(job(ids.b1, b.team_id, dirs[0]) as never);
    t.trainingJobs.put(job(ids.run, a.team_id, dirs[1], 'running') as never);
  });

  const listed = async (key: string) => {
    const bm = await call(ts.url, 'GET', '/base-models', { key });
    const v1 = await call(ts.url, 'GET', '/v1/models', { key });
    t.equal(bm.status, 200, 'GET /base-models');
    t.equal(v1.status, 200, 'GET /v1/models');
    return { bm: bm.body.models as { id: string }[], v1: v1.body.data as { id: string }[] };
  };
  const la = await listed(a.key);
  for (const l of [la.bm, la.v1]) {
    const own = l.filter((m) => Object.values(ids).includes(m.id)).map((m) => m.id).sort();
    t.same(own, [ids.a1, ids.a2].sort(), 'team A sees its complete and deployed jobs, not B\'s nor a running one');
    t.ok(l.some((m) => m.id === BASE), 'and the base catalog');
  }
  t.match(la.bm.find((m) => m.id === ids.a1), {
    task_type: 'decoder', supports_inference: true, source: 'fine_tuned', base_model: BASE, context_length: 512,
  });
  t.match(la.v1.find((m) => m.id === ids.a2), { object: 'model', owned_by: 'team', created_at: now });
  const lb = await listed(b.key);
  for (const l of [lb.bm, lb.v1]) {
    t.same(l.filter((m) => Object.values(ids).includes(m.id)).map((m) => m.id), [ids.b1], 'team B sees only its own');
  }
  const dec = await call(ts.url, 'GET', '/base-models?task_type=encoder', { key: a.key });
  t.notOk(dec.body.models.some((m: { id: string }) => m.id === ids.a1), 'the task_type filter applies to them');
  t.equal((await call(ts.url, 'GET', `/v1/models/${ids.a1}`, { key: a.key })).status, 200);
  const foreign = await call(ts.url, 'GET', `/v1/models/${ids.a1}`, { key: b.key });
  t.equal(foreign.status, 404, 'another team\'s model is 404');
  const paged = await call(ts.url, 'GET', `/v1/models?after_id=${BASE}&limit=1000`, { key: a.key });
  t.ok(paged.body.data.some((m: { id: string }) => m.id === ids.a2), 'paging walks into the fine-tuned models');

  // callable by id on every endpoint; each answers with its own adapter's tokens (greedy)
  const messages = [{ role: 'user', content: PROMPT }];
  const want = await Promise.all([refs[0], refs[1]].map(async (r) =>
    (await generateAll(runtime, r, { messages: messages as never, max_tokens: 12, temperature: 0 })).text));
  const opts = { max_tokens: 12, temperature: 0 };
  const [inf, chat, msg] = await Promise.all([
    call(ts.url, 'POST', '/inference', { key: a.key, body: { model_id: ids.a1, messages, ...opts } }),
    call(ts.url, 'POST', '/v1/chat/completions', { key: a.key, body: { model: ids.a2, messages, ...opts } }),
    call(ts.url, 'POST', '/v1/messages', { key: a.key, body: { model: ids.a1, messages, ...opts } }),
  ]);
  t.equal(inf.status, 200, inf.text);
  t.equal(inf.body.result.content, want[0], '/inference runs job A1\'s adapter');
  t.equal(chat.status, 200, chat.text);
  t.equal(chat.body.choices[0].message.content, want[1], '/v1/chat/completions runs job A2\'s adapter');
  t.equal(msg.status, 200, msg.text);
  t.equal(msg.body.content[0].text, want[0], '/v1/messages runs job A1\'s adapter');
  const other = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: b.key, body: { model: ids.a1, messages, max_tokens: 4 },
  });
  t.equal(other.status, 404, 'another team cannot call it');

  const health = await call(ts.url, 'GET', '/health');
  const mem = health.body.models_memory.filter((m: { id: string }) => m.id === BASE);
  t.equal(mem.length, 1, 'one base in memory for the base and both jobs');
  t.same(health.body.models_loaded, [BASE]);
  t.ok(mem[0].adapters.some((x: { id: string }) => x.id === ids.a1), JSON.stringify(mem[0].adapters));
  const del = await call(ts.url, 'DELETE', `/felix/training-jobs/${ids.a1}`, { key: a.key });
  t.equal(del.status, 200, del.text);
  const after = (await call(ts.url, 'GET', '/health')).body.models_memory.find((m: { id: string }) => m.id === BASE);
  t.notOk(after.adapters.some((x: { id: string }) => x.id === ids.a1), 'deleting the job unloaded its adapter');
  t.ok(after.adapters.some((x: { id: string }) => x.id === ids.a2), 'the other job\'s adapter stays');
  const gone = await call(ts.url, 'GET', '/base-models', { key: a.key });
  t.notOk(gone.body.models.some((m: { id: string }) => m.id === ids.a1), 'and it left the catalog');

  // a deployed job: its project's first call loads its adapter into the base; deleting the project unloads it
  const adapterIds = async () => ((await call(ts.url, 'GET', '/health')).body.models_memory
    .find((m: { id: string }) => m.id === BASE).adapters as { id: string }[]).map((x) => x.id);
  runtime.unload!({ id: ids.a2, kind: 'decoder' });
  t.notOk((await adapterIds()).includes(ids.a2));
  const pr = await call(ts.url, 'POST', '/projects', { key: a.key, body: { name: 'stories' } });
  t.equal(pr.status, 200, pr.text);
  const dep = await call(ts.url, 'POST', `/projects/${pr.body.id}/deployments`, {
    key: a.key, body: { training_job_id: ids.a2 },
  });
  t.equal(dep.status, 200, dep.text);
  t.equal(dep.body.status, 'active', 'its base is loaded: active at once');
  const viaProject = await call(ts.url, 'POST', `/projects/${pr.body.id}/inference`, {
    key: a.key, body: { text: PROMPT, task: 'generate', max_tokens: 12, temperature: 0 },
  });
  t.equal(viaProject.status, 200, viaProject.text);
  t.equal(viaProject.body.result.content, want[1], 'the project serves job A2\'s adapter');
  t.ok((await adapterIds()).includes(ids.a2), 'the deployed job\'s adapter is loaded');
  t.equal((await call(ts.url, 'DELETE', `/projects/${pr.body.id}`, { key: a.key })).status, 204);
  t.notOk((await adapterIds()).includes(ids.a2), 'deleting the project unloaded it');
});
