// The compat endpoints over the PRODUCTION runtime seam (src/service/runtime-local.ts): a models
// directory holding the tiny decoder and encoder (symlinks), discovered and loaded on demand.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { startServer, makeUser } from '../service/helpers.ts';
import { DECODER_DIR, ENCODER_DIR } from './tiny-runtime.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-compat-models-'));
symlinkSync(DECODER_DIR, join(modelsDir, 'tinystories'));
symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
const runtime = createLocalRuntime({ modelsDir });
const ts = await startServer({ runtime, config: { modelsDir } });
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 1000 });
const oai = new OpenAI({ apiKey: u.key, baseURL: `${ts.url}/v1`, maxRetries: 0 });
const ant = new Anthropic({ apiKey: u.key, baseURL: ts.url, maxRetries: 0 });
const PROMPT = 'Once upon a time, there was a little girl named Lily.';

t.test('models on disk are listed and served', async (t) => {
  const ids = [];
  for await (const m of oai.models.list()) ids.push(m.id);
  t.ok(ids.includes('tinystories') && ids.includes('gliner2-tiny'), ids.join(','));
});

t.test('chat: greedy stream equals the non-streamed answer', async (t) => {
  const body = { model: 'tinystories', messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: 12, temperature: 0 };
  const r = await oai.chat.completions.create(body);
  t.ok(r.choices[0]!.message.content!.length > 0);
  let text = '';
  for await (const c of await oai.chat.completions.create({ ...body, stream: true })) text += c.choices[0]?.delta?.content ?? '';
  t.equal(text, r.choices[0]!.message.content);
});

t.test('messages: cache write then read with a system marker', async (t) => {
  const system = Array.from({ length: 14 }, (_, i) => `Rule ${i + 1}: the story is about a kind dog named Max who loves the park.`).join(' ');
  const req = { model: 'tinystories', max_tokens: 4, system: [{ type: 'text' as const, text: system, cache_control: { type: 'ephemeral' as const } }], messages: [{ role: 'user' as const, content: 'Go.' }] };
  const a = await ant.messages.create(req);
  const b = await ant.messages.create(req);
  t.ok((a.usage.cache_creation_input_tokens ?? 0) > 0, JSON.stringify(a.usage));
  t.ok((b.usage.cache_read_input_tokens ?? 0) > 0, JSON.stringify(b.usage));
});

t.test('router with schema → the encoder on disk; embeddings', async (t) => {
  const r = await oai.chat.completions.create({
    model: 'service/auto',
    messages: [{ role: 'user', content: 'Tim Cook leads Apple.' }],
    // @ts-expect-error service extension
    schema: { entities: ['person', 'company'] },
  });
  t.type(JSON.parse(r.choices[0]!.message.content!).entities, 'object');
  const e = await oai.embeddings.create({ model: 'gliner2-tiny', input: ['a', 'b c'] });
  t.equal(e.data.length, 2);
  t.ok(e.usage.prompt_tokens > 0);
});

t.test('logprobs reach the client', { todo: 'runtime-local.ts drops `logprobs` from delta events' }, async (t) => {
  const r = await oai.chat.completions.create({ model: 'tinystories', messages: [{ role: 'user', content: PROMPT }], max_tokens: 3, logprobs: true, top_logprobs: 2 });
  t.ok((r.choices[0]!.logprobs?.content?.length ?? 0) > 0);
});
