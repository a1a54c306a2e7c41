// The compatibility endpoints driven by the official SDKs (`openai`, `@anthropic-ai/sdk`) against a
// server on a loopback port, over the real tiny models: tinystories-656k (decoder, fallback chat
// template) and gliner2-tiny-span (encoder).
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, makeUser, call, type TestServer, type TestUser } from '../service/helpers.ts';
import { TinyRuntime } from './tiny-runtime.ts';

const DEC = 'tinystories-656k';
const ENC = 'gliner2-tiny-span';

/** awaits a rejection and checks it with `pred` */
async function rejectsWith(t: Test, p: Promise<unknown>, pred: (e: any) => boolean, msg: string) {
  try {
    await p;
    t.fail(`${msg}: expected an error`);
  } catch (e) {
    t.ok(pred(e), `${msg} (${(e as Error)?.constructor?.name}: ${(e as Error)?.message})`);
  }
}

const rt = await TinyRuntime.load();
const ts: TestServer = await startServer({ runtime: rt });
t.teardown(() => ts.close());
const paid: TestUser = await makeUser(ts, { credits: 10_000 });
const free: TestUser = await makeUser(ts, {});

const oai = new OpenAI({ apiKey: paid.key, baseURL: `${ts.url}/v1`, maxRetries: 0 });
const ant = new Anthropic({ apiKey: paid.key, baseURL: ts.url, maxRetries: 0 });

const PROMPT = 'Once upon a time, there was a little girl named Lily.';
// sampling fields the messages-style SDK's types no longer list; the endpoint still takes them
const greedy = { temperature: 0 } as {};

t.test('chat completions: non-streaming, usage, x_service, stored record', async (t) => {
  const r = await oai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: PROMPT }], max_tokens: 12, temperature: 0 });
  t.equal(r.object, 'chat.completion');
  t.equal(r.model, DEC);
  t.type(r.choices[0]!.message.content, 'string');
  t.ok(r.choices[0]!.message.content!.length > 0, 'generated text');
  t.ok(['stop', 'length'].includes(r.choices[0]!.finish_reason));
  const u = r.usage as unknown as Record<string, number> & { prompt_tokens_details: { cached_tokens: number } };
  t.ok(u.prompt_tokens + u.cache_read_tokens + u.cache_write_tokens > 0);
  t.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens + u.cache_read_tokens + u.cache_write_tokens, 'total is the sum of the four');
  t.equal(u.prompt_tokens_details.cached_tokens, u.cache_read_tokens);
  t.ok(u.completion_tokens >= 1 && u.completion_tokens <= 12);
  const x = (r as unknown as { x_service: { inference_id: string; routed_model: string } }).x_service;
  t.equal(x.routed_model, DEC);
  const rec = await call(ts.url, 'GET', `/inferences/${x.inference_id}`, { key: paid.key });
  t.equal(rec.status, 200, 'the call is stored as an inference record');
});

t.test('chat completions: streaming matches non-streaming (greedy), usage in the final chunk', async (t) => {
  const body = { model: DEC, messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: 16, temperature: 0 };
  const full = await oai.chat.completions.create(body);
  const stream = await oai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let last: OpenAI.Chat.Completions.ChatCompletionChunk | null = null;
  let finish: string | null = null;
  let n = 0;
  for await (const chunk of stream) {
    n++;
    t.equal(chunk.object, 'chat.completion.chunk');
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    last = chunk;
  }
  t.ok(n > 2, 'several chunks');
  t.equal(text, full.choices[0]!.message.content, 'same text streamed');
  t.equal(finish, full.choices[0]!.finish_reason);
  t.same(last!.choices, [], 'usage chunk has no choices');
  t.equal(last!.usage!.completion_tokens, full.usage!.completion_tokens);
});

t.test('chat completions: n choices, logprobs, prompt caching on user blocks', async (t) => {
  const r = await oai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: PROMPT }], max_tokens: 6, n: 2, seed: 7, logprobs: true, top_logprobs: 3 });
  t.equal(r.choices.length, 2);
  t.same(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    const lp = c.logprobs!.content!;
    t.ok(lp.length >= 1);
    t.ok(lp.every((x) => x.logprob <= 0 && x.top_logprobs.length === 3), 'a logprob per token with 3 alternatives');
  }
  const long = Array.from({ length: 10 }, () => 'The little dog ran to the park and played with a red ball all day long.').join(' ');
  const body = { model: DEC, max_tokens: 4, temperature: 0, messages: [{ role: 'user' as const, content: [{ type: 'text' as const, text: long, cache_control: { type: 'ephemeral' } }, { type: 'text' as const, text: ' What happened?' }] }] };
  await oai.chat.completions.create(body as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
  const again = await oai.chat.completions.create(body as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
  t.ok(again.usage!.prompt_tokens_details!.cached_tokens! > 0, `second call reports cached tokens (${JSON.stringify(again.usage)})`);
});

t.test('completions: text_completion, streaming', async (t) => {
  const r = await oai.completions.create({ model: DEC, prompt: PROMPT, max_tokens: 10, temperature: 0 });
  t.equal(r.object, 'text_completion');
  t.ok(r.choices[0]!.text.length > 0);
  const s = await oai.completions.create({ model: DEC, prompt: PROMPT, max_tokens: 10, temperature: 0, stream: true });
  let text = '';
  for await (const c of s) {
    t.equal(c.object, 'text_completion');
    text += c.choices[0]?.text ?? '';
  }
  t.equal(text, r.choices[0]!.text);
});

t.test('responses: create and stream', async (t) => {
  const r = await oai.responses.create({ model: DEC, input: PROMPT, instructions: 'Tell a story.', max_output_tokens: 10, temperature: 0 });
  t.equal(r.object, 'response');
  t.ok(['completed', 'incomplete'].includes(r.status!));
  t.ok(r.output_text.length > 0);
  t.equal(r.instructions, 'Tell a story.');
  const s = await oai.responses.create({ model: DEC, input: PROMPT, instructions: 'Tell a story.', max_output_tokens: 10, temperature: 0, stream: true });
  const types: string[] = [];
  let text = '';
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
  }
  t.equal(types[0], 'response.created');
  t.ok(types.at(-1) === 'response.completed' || types.at(-1) === 'response.incomplete');
  t.equal(text, r.output_text);
  // the SDK's accumulating helper validates the whole event sequence
  const helper = oai.responses.stream({ model: DEC, input: PROMPT, max_output_tokens: 6, temperature: 0 });
  const final = await helper.finalResponse();
  t.ok(final.output_text.length > 0);
});

t.test('models: OpenAI list and messages-style cursor pagination', async (t) => {
  const all = [];
  for await (const m of oai.models.list()) all.push(m.id);
  t.ok(all.includes(DEC) && all.includes(ENC) && all.includes('service/auto'));
  const paged: string[] = [];
  let pages = 0;
  for await (const page of (await ant.models.list({ limit: 2 })).iterPages()) {
    pages++;
    for (const m of page.data) {
      t.equal(m.type, 'model');
      t.type(m.display_name, 'string');
      t.type(m.created_at, 'string');
      paged.push(m.id);
    }
  }
  t.same(paged, all, 'forward pages cover the catalog in order');
  t.equal(pages, Math.ceil(all.length / 2));
  const back = await ant.models.list({ limit: 2, before_id: all[3]! });
  t.same(back.data.map((m) => m.id), [all[1], all[2]]);
  const one = await ant.models.retrieve(DEC);
  t.equal(one.id, DEC);
});

t.test('messages: system blocks with a cache marker; the second call reads the cache', async (t) => {
  const system = Array.from({ length: 12 }, (_, i) => `Rule ${i + 1}: the story is about a kind dog named Max who loves the park.`).join(' ');
  const req: Anthropic.MessageCreateParamsNonStreaming = {
    model: DEC,
    max_tokens: 8,
    ...greedy,
    system: [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: 'Tell me a story.' }],
  };
  const a = await ant.messages.create(req);
  t.equal(a.type, 'message');
  t.equal(a.role, 'assistant');
  t.equal(a.content[0]!.type, 'text');
  t.ok(['end_turn', 'max_tokens'].includes(a.stop_reason!));
  t.ok((a.usage.cache_creation_input_tokens ?? 0) > 0, `first call writes the cache (${JSON.stringify(a.usage)})`);
  const b = await ant.messages.create(req);
  t.ok((b.usage.cache_read_input_tokens ?? 0) > 0, `second call reads the cache (${JSON.stringify(b.usage)})`);
  t.ok(b.usage.input_tokens < a.usage.input_tokens + (a.usage.cache_creation_input_tokens ?? 0), 'fewer uncached input tokens');
  t.same((b.content[0] as { text: string }).text, (a.content[0] as { text: string }).text, 'same greedy text from the cache');
  // billed with the model's caching family (local decoders: automatic, reads at 0.5x the input price)
  const idOf = (m: unknown) => (m as { x_service: { inference_id: string } }).x_service.inference_id;
  const ra = await call(ts.url, 'GET', `/inferences/${idOf(a)}`, { key: paid.key });
  const rb = await call(ts.url, 'GET', `/inferences/${idOf(b)}`, { key: paid.key });
  t.ok(rb.body.cost < ra.body.cost, `the cache hit costs less (${ra.body.cost} then ${rb.body.cost})`);
  t.equal(rb.body.usage.cache_read_tokens, b.usage.cache_read_input_tokens, 'the stored usage is what the client saw');
});

t.test('messages: streaming event sequence through the SDK helper', async (t) => {
  const s = ant.messages.stream({ model: DEC, max_tokens: 10, ...greedy, messages: [{ role: 'user', content: PROMPT }] });
  const types: string[] = [];
  s.on('streamEvent', (e) => types.push(e.type));
  const msg = await s.finalMessage();
  t.equal(types[0], 'message_start');
  t.equal(types.at(-1), 'message_stop');
  t.ok(types.includes('content_block_delta'));
  t.ok(types.includes('message_delta'));
  const ref = await ant.messages.create({ model: DEC, max_tokens: 10, ...greedy, messages: [{ role: 'user', content: PROMPT }] });
  t.same(msg.content, ref.content, 'streamed message equals the non-streamed one');
  t.equal(msg.usage.output_tokens, ref.usage.output_tokens);
});

/** all input tokens of a messages-style usage: uncached, cache reads and cache writes */
const inputOf = (u: Anthropic.Usage) => u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);

t.test('messages: message_start carries the input usage (as the reference API sends it)', async (t) => {
  // a prompt no other test sends, so the first call writes the cache and the second reads it
  const content = `${PROMPT} She had a red ball.`;
  const req = { model: DEC, max_tokens: 6, ...greedy, messages: [{ role: 'user' as const, content }] };
  for (const round of ['first', 'second']) {
    const s = ant.messages.stream(req);
    let start: Anthropic.Usage | null = null;
    s.on('streamEvent', (e) => { if (e.type === 'message_start') start = { ...e.message.usage }; });
    const msg = await s.finalMessage();
    const u = start as unknown as Anthropic.Usage;
    t.ok(u && inputOf(u) > 0, `${round}: message_start has input tokens (${JSON.stringify(u)})`);
    t.equal(u.input_tokens, msg.usage.input_tokens, `${round}: input_tokens at the start = the final count`);
    t.equal(u.cache_read_input_tokens, msg.usage.cache_read_input_tokens, `${round}: cache reads at the start`);
    t.equal(u.cache_creation_input_tokens, msg.usage.cache_creation_input_tokens, `${round}: cache writes`);
    t.equal(u.output_tokens, 0, `${round}: nothing generated yet`);
    t.ok(inputOf(u) > 10, `${round}: the whole prompt is counted`);
  }
});

t.test('messages: count_tokens through the SDK equals the input a call is billed for', async (t) => {
  const input_schema = { type: 'object' as const, properties: { city: { type: 'string' } } };
  const tools = [{ name: 'get_weather', description: 'Weather of a city', input_schema }];
  const user = (content: string) => [{ role: 'user' as const, content }];
  const cases = [
    { name: 'plain', body: { messages: user('Tom saw a big dog in the park.') } },
    { name: 'system', body: { system: 'You tell short stories.', messages: user('A cat and a hat.') } },
    { name: 'tools', body: { tools, messages: user('Is it sunny in Paris?') } },
  ];
  for (const c of cases) {
    const n = await ant.messages.countTokens({ model: DEC, ...c.body });
    t.same(Object.keys(n), ['input_tokens'], `${c.name}: {input_tokens}`);
    const m = await ant.messages.create({ model: DEC, max_tokens: 2, ...greedy, ...c.body });
    t.equal(n.input_tokens, inputOf(m.usage), `${c.name}: ${n.input_tokens} tokens, as processed (${JSON.stringify(m.usage)})`);
  }
  const sys = await ant.messages.countTokens({ model: DEC, ...cases[1]!.body });
  const bare = await ant.messages.countTokens({ model: DEC, messages: cases[1]!.body.messages });
  t.ok(sys.input_tokens > bare.input_tokens, 'the system prompt counts');
  const messages = cases[0]!.body.messages;
  await rejectsWith(t, ant.messages.countTokens({ model: 'no-such-model', messages }),
    (e) => e instanceof Anthropic.NotFoundError, 'unknown model: 404');
  await rejectsWith(t, ant.messages.countTokens({ model: DEC, messages: [] }),
    (e) => e instanceof Anthropic.UnprocessableEntityError, 'no messages: 422');
  const noKey = new Anthropic({ apiKey: 'sk-not-a-key', baseURL: ts.url, maxRetries: 0 });
  await rejectsWith(t, noKey.messages.countTokens({ model: DEC, messages }),
    (e) => e instanceof Anthropic.AuthenticationError, 'a bad key: 401');
});

t.test('tool_choice forcing a tool the vocabulary cannot spell: the error names tool_choice', async (t) => {
  // tinystories-656k has no token for these characters and no byte fallback
  const schema = { type: 'object' as const, properties: { city: { const: '東京' } }, required: ['city'] };
  const tools = [{ name: 'pick_city', description: 'Pick a city', input_schema: schema }];
  const check = (e: any) => {
    const msg = String(e?.message);
    return e?.status === 422 && msg.includes('tool_choice') && msg.includes('pick_city')
      && !msg.includes('response_format');
  };
  const messages = [{ role: 'user' as const, content: 'Where?' }];
  await rejectsWith(t, ant.messages.create({
    model: DEC, max_tokens: 8, tools, tool_choice: { type: 'tool', name: 'pick_city' }, messages,
  }), check, 'messages: forced tool → 422 about tool_choice');
  const fn = [{ type: 'function' as const, function: { name: 'pick_city', parameters: schema } }];
  try {
    const tool_choice = { type: 'function' as const, function: { name: 'pick_city' } };
    await oai.chat.completions.create({ model: DEC, max_tokens: 8, tools: fn, tool_choice, messages });
    t.fail('chat: expected an error');
  } catch (e) {
    t.ok(check(e), `chat: forced tool → 422 about tool_choice (${(e as Error).message})`);
    t.equal((e as { param?: string }).param, 'tool_choice', "chat: param is 'tool_choice'");
  }
  // the same schema as response_format still names response_format
  await rejectsWith(t, oai.chat.completions.create({
    model: DEC, max_tokens: 8, messages, response_format: { type: 'json_schema', json_schema: { name: 'c', schema } },
  }), (e) => e?.status === 422 && String(e.message).includes('response_format'), 'response_format → 422 naming it');
});

t.test('messages: a matched stop sequence is reported as stop_reason stop_sequence', async (t) => {
  const req = { model: DEC, max_tokens: 24, ...greedy, messages: [{ role: 'user' as const, content: PROMPT }] };
  const free = await ant.messages.create(req);
  const text = (free.content[0] as { text: string }).text;
  // a word from the middle of the greedy continuation: the same greedy run must stop right before it
  const words = text.split(/\s+/).filter((w) => /^[a-z]{3,}$/i.test(w));
  t.ok(words.length >= 2, `greedy text has words (${JSON.stringify(text)})`);
  const stopWord = words[1]!;
  const cut = await ant.messages.create({ ...req, stop_sequences: ['@@never@@', stopWord] });
  t.equal(cut.stop_reason, 'stop_sequence');
  t.equal(cut.stop_sequence, stopWord, 'names the stop string that matched');
  const cutText = (cut.content[0] as { text: string }).text;
  t.equal(cutText, text.slice(0, text.indexOf(stopWord)), 'the text ends right before the stop string');
  t.ok(cut.usage.output_tokens < free.usage.output_tokens, 'fewer tokens generated');
  // streaming: message_delta carries the same
  const s = ant.messages.stream({ ...req, stop_sequences: [stopWord] });
  const msg = await s.finalMessage();
  t.equal(msg.stop_reason, 'stop_sequence');
  t.equal(msg.stop_sequence, stopWord);
  // a run that ends without matching reports no stop sequence
  t.equal(free.stop_sequence, null);
  t.ok(['end_turn', 'max_tokens'].includes(free.stop_reason!));
});

t.test('schema extension: encoder through chat completions and the router', async (t) => {
  const r = await oai.chat.completions.create({
    model: 'service/auto',
    messages: [{ role: 'user', content: 'Tim Cook is the chief executive of Apple in Cupertino.' }],
    // @ts-expect-error service extension
    schema: ['person', 'company', 'location'],
  });
  const parsed = JSON.parse(r.choices[0]!.message.content!);
  t.type(parsed.entities, 'object', 'the encoder result is JSON in the message content');
  t.equal((r as unknown as { x_service: { routed_model: string } }).x_service.routed_model, ENC, 'routed to the encoder');
});

t.test('router: free accounts use service/auto; a direct model is 402', async (t) => {
  const freeOai = new OpenAI({ apiKey: free.key, baseURL: `${ts.url}/v1`, maxRetries: 0 });
  const r = await freeOai.chat.completions.create({ model: 'service/auto', messages: [{ role: 'user', content: PROMPT }], max_tokens: 4 });
  t.ok((r as unknown as { x_service: { routed_model: string } }).x_service.routed_model.startsWith('tinystories'));
  await rejectsWith(t, freeOai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: PROMPT }], max_tokens: 4 }),
    (e) => e instanceof OpenAI.APIError && e.status === 402 && e.code === 'direct_model_requires_credits', 'direct model without credits is 402');
});

t.test('structured output: a schema the vocabulary cannot spell is a 422 naming response_format, before anything runs', async (t) => {
  // tinystories-656k's 2048 tokens hold no '{' and it has no byte fallback: no JSON object is expressible
  // (the real structured-output round trip runs on a byte-level tokenizer in local-runtime.test.ts)
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } }, required: ['name', 'age'], additionalProperties: false };
  for (const stream of [false, true]) {
    await rejectsWith(t, (async () => {
      const r = await oai.chat.completions.create({
        model: DEC, messages: [{ role: 'user', content: 'Give me a character.' }], max_tokens: 60, stream,
        response_format: { type: 'json_schema', json_schema: { name: 'character', schema, strict: true } },
      } as OpenAI.Chat.Completions.ChatCompletionCreateParams);
      if (stream) for await (const _ of r as AsyncIterable<unknown>) { /* drain */ }
    })(), (e) => e instanceof OpenAI.UnprocessableEntityError && e.param === 'response_format' && (e.error as { type: string }).type === 'invalid_request_error' &&
      /cannot produce JSON/.test(e.message), `unsatisfiable json_schema (stream: ${stream}): 422 invalid_request_error, param response_format`);
  }
  await rejectsWith(t, oai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: 'x' }], max_tokens: 8, response_format: { type: 'json_object' } }),
    (e) => e instanceof OpenAI.UnprocessableEntityError && e.param === 'response_format', 'json_object: 422 too');
  // unsupported schema keywords are the same family of error
  await rejectsWith(t, oai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: 'x' }], max_tokens: 8,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a+$' } } } }),
    (e) => e instanceof OpenAI.UnprocessableEntityError && e.param === 'response_format' && /pattern/.test(e.message), 'unsupported keyword: 422 naming it');
});

t.test('errors: typed SDK errors with the spec shapes', async (t) => {
  await rejectsWith(t, oai.chat.completions.create({ model: DEC, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' as unknown as number }),
    (e) => e instanceof OpenAI.UnprocessableEntityError && e.param === 'temperature' && (e.error as { type: string }).type === 'invalid_request_error', 'wrong type: 422 naming the param');
  await rejectsWith(t, oai.chat.completions.create({ model: 'no/such-model', messages: [{ role: 'user', content: 'x' }] }), (e) => e instanceof OpenAI.NotFoundError, 'unknown model: 404');
  const bad = new OpenAI({ apiKey: 'loom_sk_nope', baseURL: `${ts.url}/v1`, maxRetries: 0 });
  await rejectsWith(t, bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError, 'bad key: 401');
  await rejectsWith(t, ant.messages.create({ model: DEC, messages: [{ role: 'user', content: 'x' }] } as unknown as Anthropic.MessageCreateParamsNonStreaming),
    (e) => e instanceof Anthropic.UnprocessableEntityError && (e.error as any)?.type === 'error' && (e.error as any)?.error?.type === 'invalid_request_error', 'missing max_tokens: messages-style 422');
  await rejectsWith(t, ant.messages.create({ model: 'tinystories-busy', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.APIError && e.status === 529 && (e.error as any)?.error?.type === 'overloaded_error', 'full queue on /v1/messages: 529 overloaded_error');
  // the same full queue on an OpenAI-style route is a 503 (529 is /v1/messages only)
  await rejectsWith(t, oai.chat.completions.create({ model: 'tinystories-busy', messages: [{ role: 'user', content: 'x' }], max_tokens: 4 }),
    (e) => e instanceof OpenAI.APIError && e.status === 503, 'full queue on chat completions: 503');
  // /v1/messages: the messages-style body only with the version header; `detail` otherwise
  const bare = await call(ts.url, 'POST', '/v1/messages', { key: paid.key, body: { model: DEC, messages: [{ role: 'user', content: 'x' }] } });
  t.equal(bare.status, 422);
  t.type(bare.body.detail, 'string');
  const versioned = await call(ts.url, 'POST', '/v1/messages', { key: paid.key, body: { model: DEC, messages: [{ role: 'user', content: 'x' }] }, headers: { 'messages-version': '2023-06-01' } });
  t.same(versioned.body, { type: 'error', error: { type: 'invalid_request_error', message: "Missing required parameter: 'max_tokens'." } });
  // a bad `schema` extension: 422 naming it
  await rejectsWith(t, oai.chat.completions.create({ model: 'service/auto', messages: [{ role: 'user', content: 'x' }], schema: { entities: 5 } } as never),
    (e) => e instanceof OpenAI.UnprocessableEntityError && e.param === 'schema.entities', 'bad schema extension: 422');
  // malformed JSON: 400 in the OpenAI envelope
  const raw = await call(ts.url, 'POST', '/v1/chat/completions', { key: paid.key, raw: '{"model":' });
  t.equal(raw.status, 400);
  t.equal(raw.body.error.type, 'invalid_request_error');
});

t.test('embeddings: float and base64 through the SDK, dimensions', async (t) => {
  const f = await oai.embeddings.create({ model: DEC, input: ['a happy dog', 'a sad cat'], encoding_format: 'float' });
  t.equal(f.data.length, 2);
  t.equal(f.data[0]!.embedding.length, 128);
  for (const v of f.data) {
    const norm = Math.hypot(...v.embedding);
    t.ok(Math.abs(norm - 1) < 1e-4, `full-size vectors are unit length (${norm})`);
  }
  const b = await oai.embeddings.create({ model: DEC, input: ['a happy dog', 'a sad cat'] }); // SDK asks base64 and decodes
  t.ok(b.data[0]!.embedding.every((x, i) => Math.abs(x - f.data[0]!.embedding[i]!) < 1e-6), 'base64 decodes to the same floats');
  const d = await oai.embeddings.create({ model: DEC, input: 'a happy dog', dimensions: 16, encoding_format: 'float' });
  t.equal(d.data[0]!.embedding.length, 16);
  t.ok(Math.abs(Math.hypot(...d.data[0]!.embedding) - 1) < 1e-4, 'shortened vectors are unit length');
  await rejectsWith(t, oai.embeddings.create({ model: DEC, input: 'x', dimensions: 4096 }), (e) => e instanceof OpenAI.UnprocessableEntityError, 'dimensions beyond the model: 422');
});

t.test('a client disconnect mid-stream cancels the generation and frees its slot', async (t) => {
  const dec = rt.decoders.get(DEC)!;
  const steps0 = dec.scheduler.stats().steps;
  const ac = new AbortController();
  const stream = await oai.chat.completions.create(
    { model: DEC, messages: [{ role: 'user', content: PROMPT }], max_tokens: 400, temperature: 0.8, stream: true },
    { signal: ac.signal },
  );
  let id = '';
  let chunks = 0;
  try {
    for await (const c of stream) {
      id ||= (c as unknown as { x_service?: { inference_id: string } }).x_service?.inference_id ?? '';
      if (++chunks === 3) ac.abort();
    }
  } catch {
    // the SDK reports the abort
  }
  t.ok(id, 'got the inference id from the first chunk');
  const t0 = Date.now();
  while (dec.scheduler.stats().running + dec.scheduler.stats().waiting > 0 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
  const st = dec.scheduler.stats();
  t.equal(st.running + st.waiting, 0, 'no sequence left in the scheduler');
  t.ok(st.steps - steps0 < 300, `generation stopped early (${st.steps - steps0} steps of up to 400)`);
  // the record says why and the call was not billed
  let rec;
  for (let i = 0; i < 50; i++) {
    rec = await call(ts.url, 'GET', `/inferences/${id}`, { key: paid.key });
    if (rec.status === 200) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(rec!.status, 200);
  t.match(JSON.stringify(rec!.body), /client disconnected/, JSON.stringify(rec!.body));
  // what was processed before the disconnect is billed: the prompt and the tokens generated so far
  const u = rec!.body.usage;
  t.ok(u.completion_tokens >= 2 && u.completion_tokens < 400, `completion tokens recorded (${JSON.stringify(u)})`);
  t.ok(u.prompt_tokens + u.cache_read_tokens + u.cache_write_tokens > 0, 'prompt tokens recorded');
  t.ok(rec!.body.cost > 0, `the cancelled call is billed (${rec!.body.cost})`);
});
