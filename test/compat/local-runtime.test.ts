// The compat endpoints over the PRODUCTION runtime seam (src/service/runtime-local.ts): a models
// directory holding the tiny decoder and encoder (symlinks), discovered and loaded on demand.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { startServer, makeUser, call } from '../service/helpers.ts';
import { DECODER_DIR, ENCODER_DIR } from './tiny-runtime.ts';
import { writeTinyQwen2 } from './tiny-checkpoint.ts';
import { Ajv } from 'ajv';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-compat-models-'));
symlinkSync(DECODER_DIR, join(modelsDir, 'tinystories'));
symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
// random weights around the byte-level Qwen2.5 fixture tokenizer (its chat template renders `tools`)
writeTinyQwen2(join(modelsDir, 'tiny-qwen2'));
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

t.test('messages (production runtime): message_start usage and count_tokens match the call', async (t) => {
  const system = 'You tell short stories about animals.';
  const req = { model: 'tinystories', max_tokens: 4, system, messages: [{ role: 'user' as const, content: PROMPT }] };
  const counted = await ant.messages.countTokens({ model: 'tinystories', system, messages: req.messages });
  const s = ant.messages.stream(req);
  let start: Anthropic.Usage | null = null;
  s.on('streamEvent', (e) => { if (e.type === 'message_start') start = { ...e.message.usage }; });
  const msg = await s.finalMessage();
  const st = start as unknown as Anthropic.Usage;
  const all = (x: Anthropic.Usage) =>
    x.input_tokens + (x.cache_read_input_tokens ?? 0) + (x.cache_creation_input_tokens ?? 0);
  t.ok(all(st) > 0, `message_start has the input usage (${JSON.stringify(st)})`);
  t.equal(all(st), all(msg.usage), 'the same input as the final usage');
  t.equal(st.input_tokens, msg.usage.input_tokens, 'uncached input at the start = at the end');
  t.equal(counted.input_tokens, all(msg.usage), `count_tokens: ${counted.input_tokens} = what the call processed`);
  // the `schema` extension: an encoder counts the text it would read
  const withSchema = { model: 'gliner2-tiny', messages: req.messages, schema: ['person'] };
  const e = await ant.messages.countTokens(withSchema as never);
  t.ok(e.input_tokens > 0, `an encoder counts its text (${e.input_tokens})`);
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

t.test('logprobs reach the client', async (t) => {
  const r = await oai.chat.completions.create({ model: 'tinystories', messages: [{ role: 'user', content: PROMPT }], max_tokens: 3, logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0]!.logprobs!.content!;
  t.equal(lp.length, r.usage!.completion_tokens, 'one entry per generated token');
  t.ok(lp.every((x) => x.logprob <= 0 && x.top_logprobs.length === 2 && x.top_logprobs[0]!.logprob >= x.top_logprobs[1]!.logprob), 'logprobs with 2 alternatives, best first');
  t.equal(lp.map((x) => x.token).join('').length > 0, true);
  // streaming chat chunks carry them too, and legacy completions get the parallel arrays
  let streamed = 0;
  for await (const c of await oai.chat.completions.create({ model: 'tinystories', messages: [{ role: 'user', content: PROMPT }], max_tokens: 3, logprobs: true, stream: true })) {
    streamed += c.choices[0]?.logprobs?.content?.length ?? 0;
  }
  t.equal(streamed, 3, 'a logprob per streamed token');
  const c = await oai.completions.create({ model: 'tinystories', prompt: PROMPT, max_tokens: 3, temperature: 0, logprobs: 2 });
  t.equal(c.choices[0]!.logprobs!.token_logprobs!.length, c.usage!.completion_tokens);
  t.equal(Object.keys(c.choices[0]!.logprobs!.top_logprobs![0]!).length, 2);
});

t.test('structured output: json_schema through the openai SDK always parses and validates', async (t) => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer' },
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
      pet: { anyOf: [{ type: 'null' }, { type: 'object', properties: { kind: { type: 'string', maxLength: 8 } }, required: ['kind'], additionalProperties: false }] },
    },
    required: ['name', 'age'],
    additionalProperties: false,
  };
  const validate = new Ajv({ strict: false }).compile(schema);
  for (const seed of [1, 2, 3]) {
    const r = await oai.chat.completions.create({
      model: 'tiny-qwen2', messages: [{ role: 'user', content: 'Give me a character.' }], max_tokens: 400, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'character', schema, strict: true } },
    });
    const text = r.choices[0]!.message.content!;
    t.equal(r.choices[0]!.finish_reason, 'stop', `seed ${seed}: the value completes (${JSON.stringify(text)})`);
    const v = JSON.parse(text);
    t.ok(validate(v), `seed ${seed}: validates against the schema ${JSON.stringify(validate.errors)}`);
  }
  // json_object: any JSON object
  const o = await oai.chat.completions.create({ model: 'tiny-qwen2', messages: [{ role: 'user', content: 'x' }], max_tokens: 400, seed: 5, response_format: { type: 'json_object' } });
  if (o.choices[0]!.finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0]!.message.content!);
    t.ok(v && typeof v === 'object' && !Array.isArray(v), 'json_object gives an object');
  } else t.match(o.choices[0]!.message.content, /^\s*\{/, 'json_object output starts an object (cut by max_tokens)');
});

t.test('tools: a template that renders `tools` gets them (prompt grows by the tool definitions); others get the system message', async (t) => {
  const tools = [{ type: 'function' as const, function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const base = { model: 'tiny-qwen2', messages: [{ role: 'user' as const, content: 'Weather in Paris?' }], max_tokens: 2, temperature: 0 };
  const plain = await oai.chat.completions.create(base);
  const withTools = await oai.chat.completions.create({ ...base, tools });
  const inTokens = (u: OpenAI.CompletionUsage) => u.prompt_tokens + (u as unknown as { cache_read_tokens: number; cache_write_tokens: number }).cache_read_tokens + (u as unknown as { cache_write_tokens: number }).cache_write_tokens;
  t.ok(inTokens(withTools.usage!) > inTokens(plain.usage!) + 20, `tools rendered into the prompt (${inTokens(plain.usage!)} → ${inTokens(withTools.usage!)})`);
  // the model's own template: Qwen's "# Tools" section, not the generic <tool_call> instructions of the fallback
  const { chatTemplateUsesTools } = await import('../../src/service/runtime-local.ts');
  t.ok(await runtime.templateSupportsTools!({ id: 'tiny-qwen2', kind: 'decoder' }), 'Qwen2.5 template renders tools');
  t.notOk(await runtime.templateSupportsTools!({ id: 'tinystories', kind: 'decoder' }), 'no template (fallback): the system-message description');
  t.notOk(chatTemplateUsesTools(undefined));
  // forced call (tool_choice required) decodes under the call schema: always a parsable tool call
  const forced = await oai.chat.completions.create({ ...base, max_tokens: 300, tools, tool_choice: 'required' });
  const call = forced.choices[0]!.message.tool_calls?.[0];
  if (forced.choices[0]!.finish_reason !== 'length') {
    t.equal(call?.type === 'function' && call.function.name, 'get_weather');
    t.type(JSON.parse((call as { function: { arguments: string } }).function.arguments).city, 'string');
  }
});

t.test('a client disconnect mid-stream is billed for what was processed (production runtime)', async (t) => {
  const ac = new AbortController();
  const stream = await oai.chat.completions.create({ model: 'tinystories', messages: [{ role: 'user', content: PROMPT }], max_tokens: 400, temperature: 0.8, stream: true }, { signal: ac.signal });
  let id = '';
  let chunks = 0;
  try {
    for await (const c of stream) {
      id ||= (c as unknown as { x_service?: { inference_id: string } }).x_service?.inference_id ?? '';
      if (++chunks === 4) ac.abort();
    }
  } catch { /* the SDK reports the abort */ }
  t.ok(id);
  let rec;
  for (let i = 0; i < 100; i++) {
    rec = await call(ts.url, 'GET', `/inferences/${id}`, { key: u.key });
    if (rec.status === 200) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(rec!.status, 200);
  t.equal(rec!.body.error, 'client disconnected');
  const usage = rec!.body.usage;
  t.ok(usage.completion_tokens >= 3 && usage.completion_tokens < 400, `completion tokens of the cancelled stream recorded (${JSON.stringify(usage)})`);
  t.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens + usage.cache_read_tokens + usage.cache_write_tokens, 'disjoint usage');
  t.ok(rec!.body.cost > 0, 'billed');
});

t.test('messages: stop_sequence through the production runtime', async (t) => {
  const req = { model: 'tinystories', max_tokens: 24, temperature: 0, messages: [{ role: 'user' as const, content: PROMPT }] } as Anthropic.MessageCreateParamsNonStreaming;
  const text = ((await ant.messages.create(req)).content[0] as { text: string }).text;
  const word = text.split(/\s+/).filter((w) => /^[a-z]{3,}$/i.test(w))[1]!;
  const cut = await ant.messages.create({ ...req, stop_sequences: [word] });
  t.equal(cut.stop_reason, 'stop_sequence');
  t.equal(cut.stop_sequence, word);
});
