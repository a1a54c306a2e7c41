// Framework-free protocol modules of the compatibility endpoints: request validation and
// normalization, cache-marker rules, tool-call parsing, response/stream builders, /v1/models
// pagination, embeddings encoding.
import t, { type Test } from 'tap';
import { CompatError, compatErrorResponse } from '../../src/service/compat/errors.ts';
import {
  normalizeChatCompletions,
  normalizeCompletions,
  normalizeEmbeddings,
  normalizeMessages,
  normalizeResponses,
  parseJsonBody,
} from '../../src/service/compat/normalize.ts';
import { parseToolCalls, ToolCallGate, forcedToolSchema } from '../../src/service/compat/tools.ts';
import {
  ChatStreamEncoder,
  chatCompletion,
  CompletionStreamEncoder,
  messageObject,
  MessagesStreamEncoder,
  newContext,
  responseObject,
  responsesEcho,
  ResponsesStreamEncoder,
} from '../../src/service/compat/build.ts';
import { listModels, parseModelsQuery } from '../../src/service/compat/models.ts';
import { embeddingsResponse } from '../../src/service/compat/embeddings.ts';
import { ServiceError, BillingError } from '../../src/service/errors.ts';

function throws422(t: Test, fn: () => unknown, param: string) {
  try {
    fn();
    t.fail(`expected a 422 on ${param}`);
  } catch (e) {
    t.ok(e instanceof CompatError, 'CompatError');
    t.equal((e as CompatError).status, 422);
    t.equal((e as CompatError).param, param, `param ${param}: ${(e as Error).message}`);
  }
}

const user = (content: unknown) => ({ role: 'user', content });
const ep = { type: 'ephemeral' };

t.test('chat: unknown fields ignored, wrong types are 422 with param', async (t) => {
  const r = normalizeChatCompletions({ model: 'm', messages: [user('hi')], some_future_field: { x: 1 }, max_completion_tokens: 7, stop: 'END', n: 2, seed: 3 });
  t.equal(r.params.max_tokens, 7);
  t.same(r.params.stop, ['END']);
  t.equal(r.n, 2);
  t.equal(r.task, 'generate');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user('hi')], temperature: 'hot' }), 'temperature');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user('hi')], temperature: 3 }), 'temperature');
  throws422(t, () => normalizeChatCompletions({ model: 'm' }), 'messages');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [{ role: 'wizard', content: 'x' }] }), 'messages[0].role');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user(42)] }), 'messages[0].content');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user([{ type: 'image_url', image_url: { url: 'x' } }])] }), 'messages[0].content[0].type');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user('x')], tool_choice: { type: 'function', function: { name: 'nope' } }, tools: [{ type: 'function', function: { name: 'f' } }] }), 'tool_choice');
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user('x')], max_tokens: 0 }), 'max_tokens');
});

t.test('chat: cache markers on system/user blocks, first 4 only, none on assistant', async (t) => {
  const blk = (text: string, cc = true) => ({ type: 'text', text, ...(cc ? { cache_control: ep } : {}) });
  const r = normalizeChatCompletions({
    model: 'm',
    messages: [
      { role: 'system', content: [blk('s1'), blk('s2')] },
      { role: 'assistant', content: [blk('a1')] },
      { role: 'user', content: [blk('u1'), blk('u2'), { type: 'text', text: 'u3', cache_control: { type: 'ephemeral', ttl: '1h' } }] },
    ],
  });
  t.same(r.cache_markers, { applied: 4, dropped: 1 });
  const m = r.messages!;
  t.ok(m[0]!.content[0]!.cache_control && m[0]!.content[1]!.cache_control);
  t.notOk(m[1]!.content[0]!.cache_control, 'assistant markers are not honoured');
  t.ok(m[2]!.content[0]!.cache_control && m[2]!.content[1]!.cache_control);
  t.notOk(m[2]!.content[2]!.cache_control, 'the 5th marker is dropped');
  // a string system prompt cannot carry a marker
  const s = normalizeChatCompletions({ model: 'm', messages: [{ role: 'system', content: 'sys' }, user('u')] });
  t.same(s.cache_markers, { applied: 0, dropped: 0 });
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user([{ type: 'text', text: 'x', cache_control: { type: 'persistent' } }])] }), 'messages[0].content[0].cache_control.type');
});

t.test('chat: response_format, tools, schema extension, logprobs', async (t) => {
  const r = normalizeChatCompletions({
    model: 'service/auto',
    messages: [user('hello')],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } } }, strict: true } },
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    tool_choice: 'required',
    logprobs: true,
    top_logprobs: 2,
  });
  t.same(r.params.response_format, { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } } }, strict: true });
  t.equal(r.tools![0]!.name, 'get_weather');
  t.equal(r.tool_choice, 'required');
  t.equal(r.params.top_logprobs, 2);
  throws422(t, () => normalizeChatCompletions({ model: 'm', messages: [user('x')], top_logprobs: 2 }), 'top_logprobs');
  const e = normalizeChatCompletions({ model: 'service/auto', messages: [user('first'), { role: 'assistant', content: 'ok' }, user('Apple hired Tim.')], schema: ['company', 'person'] });
  t.equal(e.task, 'extract');
  t.equal(e.extract!.text, 'Apple hired Tim.', 'the last user message is the text');
});

t.test('completions: prompt string, no markers, unsupported shapes are 422', async (t) => {
  const r = normalizeCompletions({ model: 'm', prompt: 'Once upon', echo: true, logprobs: 2 });
  t.equal(r.prompt, 'Once upon');
  t.equal(r.params.max_tokens, 16, 'public default');
  t.equal(r.params.top_logprobs, 2);
  t.same(r.cache_markers, { applied: 0, dropped: 0 });
  throws422(t, () => normalizeCompletions({ model: 'm', prompt: [1, 2, 3] }), 'prompt');
  throws422(t, () => normalizeCompletions({ model: 'm', prompt: 'x', suffix: 'y' }), 'suffix');
  throws422(t, () => normalizeCompletions({ model: 'm', prompt: 5 }), 'prompt');
});

t.test('responses: instructions, items, markers only on system/developer blocks', async (t) => {
  const r = normalizeResponses({
    model: 'm',
    instructions: 'Be brief.',
    input: [
      { role: 'developer', content: [{ type: 'input_text', text: 'dev', cache_control: ep }] },
      { role: 'user', content: [{ type: 'input_text', text: 'q', cache_control: ep }] },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
      { type: 'function_call_output', call_id: 'c1', output: '42' },
    ],
    max_output_tokens: 5,
    text: { format: { type: 'json_schema', name: 'o', schema: { type: 'object' } } },
  });
  t.equal(r.messages![0]!.role, 'system');
  t.equal(r.messages![0]!.content[0]!.text, 'Be brief.');
  t.ok(r.messages![1]!.content[0]!.cache_control, 'developer block marker honoured');
  t.notOk(r.messages![2]!.content[0]!.cache_control, 'user block marker ignored');
  t.same(r.cache_markers.applied, 1);
  t.equal(r.messages![3]!.tool_calls![0]!.name, 'f');
  t.equal(r.messages![4]!.role, 'tool');
  t.equal(r.params.max_tokens, 5);
  t.equal(r.params.response_format!.type, 'json_schema');
  const s = normalizeResponses({ model: 'm', input: 'hello' });
  t.equal(s.messages![0]!.content[0]!.text, 'hello');
  throws422(t, () => normalizeResponses({ model: 'm', input: 'x', previous_response_id: 'resp_1' }), 'previous_response_id');
});

t.test('messages: system blocks, tools and message markers, tool_use/tool_result', async (t) => {
  const r = normalizeMessages({
    model: 'm',
    max_tokens: 10,
    tools: [{ name: 'lookup', input_schema: { type: 'object' }, cache_control: ep }],
    system: [{ type: 'text', text: 'long system', cache_control: { type: 'ephemeral', ttl: '1h' } }],
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'q', cache_control: ep }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { k: 1 } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'res', cache_control: ep }, { type: 'text', text: 'more', cache_control: ep }] },
    ],
    stop_sequences: ['\n\n'],
    top_k: 5,
  });
  t.same(r.cache_markers, { applied: 4, dropped: 1 }, 'tools, system, two message markers; the fifth dropped');
  t.same(r.tools![0]!.cache_control, { type: 'ephemeral' });
  t.same(r.messages![0]!.content[0]!.cache_control, { type: 'ephemeral', ttl: '1h' });
  t.equal(r.messages![2]!.tool_calls![0]!.arguments, '{"k":1}');
  t.equal(r.messages![3]!.role, 'tool');
  t.equal(r.messages![3]!.tool_call_id, 'toolu_1');
  t.notOk(r.messages![4]!.content[0]!.cache_control);
  t.same(r.params.stop, ['\n\n']);
  t.equal(r.params.top_k, 5);
  const s = normalizeMessages({ model: 'm', max_tokens: 1, system: 'plain', messages: [user('x')] });
  t.equal(s.cache_markers.applied, 0, 'a string system carries no marker');
  throws422(t, () => normalizeMessages({ model: 'm', messages: [user('x')] }), 'max_tokens');
  throws422(t, () => normalizeMessages({ model: 'm', max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }), 'messages[0].role');
  throws422(t, () => normalizeMessages({ model: 'm', max_tokens: 5, messages: [user('x')], temperature: 1.5 }), 'temperature');
});

t.test('errors: both wire shapes, service errors keep their status/code, unhandled hides detail', async (t) => {
  const e = compatErrorResponse('openai', new CompatError(422, 'bad', { param: 'temperature', code: 'invalid_value' }));
  t.same(e, { status: 422, headers: {}, body: { error: { message: 'bad', type: 'invalid_request_error', param: 'temperature', code: 'invalid_value' } } });
  const m = compatErrorResponse('messages', new ServiceError(529, 'Overloaded', { code: 'overloaded' }));
  t.same(m.body, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  t.equal(m.status, 529);
  const b = compatErrorResponse('openai', new BillingError('direct_model_requires_credits', 'need credits', 'http://x/billing'));
  t.equal(b.status, 402);
  t.equal((b.body.error as { code: string }).code, 'direct_model_requires_credits');
  t.equal((b.body.error as { resolution_url: string }).resolution_url, 'http://x/billing');
  const u = compatErrorResponse('openai', new TypeError('secret internal detail'));
  t.equal(u.status, 500);
  t.notMatch(JSON.stringify(u.body), /secret/);
  t.throws(() => parseJsonBody('{"a":'), { status: 400 } as unknown as Error);
});

t.test('tool calls: formats parsed, unknown names are not calls, gate holds call text', async (t) => {
  const tools = [{ name: 'get_weather', parameters: {} }];
  const h = parseToolCalls('Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', tools);
  t.equal(h.calls.length, 1);
  t.equal(h.calls[0]!.arguments, '{"city":"Paris"}');
  t.equal(h.content, 'Sure.');
  t.equal(parseToolCalls('{"name": "get_weather", "parameters": {"city": "Rome"}}', tools).calls[0]!.arguments, '{"city":"Rome"}');
  t.equal(parseToolCalls('[TOOL_CALLS] [{"name": "get_weather", "arguments": {}}]', tools).calls.length, 1);
  t.equal(parseToolCalls('{"name": "rm_rf", "arguments": {}}', tools).calls.length, 0);
  t.equal(parseToolCalls('{"weather": "nice"}', tools).calls.length, 0);
  const g = new ToolCallGate();
  let shown = '';
  for (const piece of ['Hello', ' there <tool', '_call>{"name"', ': "get_weather"}']) shown += g.push(piece);
  t.equal(shown, 'Hello there ');
  t.equal(g.end(), '<tool_call>{"name": "get_weather"}');
  const g2 = new ToolCallGate();
  t.equal(g2.push('a < b'), 'a < b', 'a lone < that cannot start a marker passes');
  const f = forcedToolSchema([{ name: 'a', parameters: { type: 'object' } }], { name: 'a' });
  t.same((f as unknown as { schema: { properties: { name: unknown } } }).schema.properties.name, { const: 'a' });
});

const X = { inference_id: 'inf_1', routed_model: 'tiny' };
const usage = { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 100, cache_write_tokens: 3 };

t.test('chat completion and chunks: shapes, usage sum, x_service, [DONE]', async (t) => {
  const ctx = newContext('chat', 'tiny', X);
  const body = chatCompletion(ctx, [{ index: 0, text: 'hi', finish_reason: 'stop' }], usage);
  t.equal(body.object, 'chat.completion');
  t.match(body.id, /^chatcmpl-/);
  t.same(body.usage, { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 100, cache_write_tokens: 3, total_tokens: 118, prompt_tokens_details: { cached_tokens: 100 }, completion_tokens_details: { reasoning_tokens: 0 } });
  t.same(body.x_service, X);
  t.equal(body.choices[0]!.message.content, 'hi');
  const enc = new ChatStreamEncoder(ctx, 1, true);
  const wire = enc.start() + enc.text(0, 'h') + enc.text(0, 'i') + enc.finishChoice({ index: 0, text: 'hi', finish_reason: 'length' }) + enc.end(usage);
  t.ok(wire.endsWith('data: [DONE]\n\n'));
  const events = wire.split('\n\n').filter(Boolean).map((l) => l.replace(/^data: /, ''));
  t.equal(events.pop(), '[DONE]');
  const chunks = events.map((e) => JSON.parse(e));
  t.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === ctx.id));
  t.same(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  t.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'hi');
  t.equal(chunks[3].choices[0].finish_reason, 'length');
  t.same(chunks[4].choices, []);
  t.equal(chunks[4].usage.total_tokens, 118);
  const noUsage = new ChatStreamEncoder(ctx, 1, false);
  t.notMatch(noUsage.start() + noUsage.end(usage), /"usage"/);
});

t.test('completion stream chunks are text_completion objects', async (t) => {
  const ctx = newContext('completions', 'tiny', X);
  const enc = new CompletionStreamEncoder(ctx, 1, false);
  const wire = enc.text(0, 'abc') + enc.finishChoice({ index: 0, text: 'abc', finish_reason: 'stop' }) + enc.end(usage);
  const chunks = wire.split('\n\n').filter((l) => l && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
  t.ok(chunks.every((c) => c.object === 'text_completion'));
  t.same(chunks[0].choices[0], { index: 0, text: 'abc', logprobs: null, finish_reason: null });
  t.equal(chunks[1].choices[0].finish_reason, 'stop');
});

function parseSse(wire: string) {
  return wire.split('\n\n').filter(Boolean).map((blk) => {
    const ev = /^event: (.*)$/m.exec(blk)?.[1];
    const data = JSON.parse(/^data: (.*)$/m.exec(blk)![1]!);
    return { ev, data };
  });
}

t.test('messages: object and the standard event sequence', async (t) => {
  const ctx = newContext('messages', 'tiny', X);
  const m = messageObject(ctx, { index: 0, text: 'yo', finish_reason: 'stop', stop_sequence: '\n\n' }, usage);
  t.equal(m.type, 'message');
  t.equal(m.stop_reason, 'stop_sequence');
  t.equal(m.stop_sequence, '\n\n');
  t.same(m.content, [{ type: 'text', text: 'yo' }]);
  t.match(m.usage, { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 100, cache_creation_input_tokens: 3, total_tokens: 118 });
  const tu = messageObject(ctx, { index: 0, text: '', finish_reason: 'tool_calls', tool_calls: [{ id: 'toolu_1', name: 'f', arguments: '{"a":1}' }] }, usage);
  t.equal(tu.stop_reason, 'tool_use');
  t.same(tu.content, [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } }]);
  const enc = new MessagesStreamEncoder(ctx);
  const ev = parseSse(enc.start() + enc.textDelta(0, 'y') + enc.textDelta(0, 'o') + enc.finish({ index: 0, text: 'yo', finish_reason: 'length' }, usage));
  t.same(ev.map((e) => e.ev), ['message_start', 'ping', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
  t.ok(ev.every((e) => e.ev === e.data.type), 'event name equals data.type');
  t.equal(ev[6]!.data.delta.stop_reason, 'max_tokens');
  t.equal(ev[6]!.data.usage.cache_read_input_tokens, 100);
});

t.test('responses: object and event sequence', async (t) => {
  const req = normalizeResponses({ model: 'm', input: 'x', instructions: 'be nice' });
  const ctx = newContext('responses', 'tiny', X);
  const o = responseObject(ctx, responsesEcho(req), { index: 0, text: 'ok', finish_reason: 'length' }, usage);
  t.equal(o.object, 'response');
  t.equal(o.status, 'incomplete');
  t.same(o.incomplete_details, { reason: 'max_output_tokens' });
  t.equal(o.output_text, 'ok');
  t.equal(o.instructions, 'be nice');
  t.equal(o.usage!.input_tokens_details.cached_tokens, 100);
  const enc = new ResponsesStreamEncoder(ctx, responsesEcho(req));
  const ev = parseSse(enc.start() + enc.textDelta(0, 'o') + enc.textDelta(0, 'k') + enc.finish({ index: 0, text: 'ok', finish_reason: 'stop' }, usage));
  t.same(ev.map((e) => e.ev), [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_text.delta', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
    'response.output_item.done', 'response.completed',
  ]);
  t.same(ev.map((e) => e.data.sequence_number), ev.map((_, i) => i));
  t.equal(ev[9]!.data.response.output[0].content[0].text, 'ok');
});

t.test('/v1/models: both list styles, cursors both ways, bad query values', async (t) => {
  const models = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id, task_type: 'decoder' }));
  const all = listModels(models, {});
  t.equal(all.object, 'list');
  t.equal(all.data.length, 5);
  t.equal(all.has_more, false);
  t.match(all.data[0], { id: 'a', object: 'model', type: 'model', display_name: 'a', owned_by: 'loom' });
  t.match(all.data[0]!.created_at, /^\d{4}-/);
  const p1 = listModels(models, { limit: 2 });
  t.same([p1.data.map((m) => m.id), p1.has_more, p1.first_id, p1.last_id], [['a', 'b'], true, 'a', 'b']);
  const p2 = listModels(models, { limit: 2, after_id: 'b' });
  t.same(p2.data.map((m) => m.id), ['c', 'd']);
  const p3 = listModels(models, { limit: 2, after_id: 'd' });
  t.same([p3.data.map((m) => m.id), p3.has_more], [['e'], false]);
  const back = listModels(models, { limit: 2, before_id: 'e' });
  t.same([back.data.map((m) => m.id), back.has_more], [['c', 'd'], true]);
  t.throws(() => listModels(models, { after_id: 'zz' }), { status: 404 } as unknown as Error);
  t.throws(() => parseModelsQuery(new URLSearchParams('limit=abc')), { status: 400 } as unknown as Error);
  t.throws(() => parseModelsQuery(new URLSearchParams('limit=0')), { status: 422 } as unknown as Error);
  t.same(parseModelsQuery(new URLSearchParams('limit=3&after_id=x')), { limit: 3, after_id: 'x' });
});

t.test('embeddings: float and base64, unit length, dimensions normalized after the cut', async (t) => {
  const req = normalizeEmbeddings({ model: 'e', input: ['a', 'b'], encoding_format: 'base64', dimensions: 2 });
  t.same(req.input, ['a', 'b']);
  const r = embeddingsResponse('e', [[3, 4, 12], [1, 0, 0]], { encoding_format: 'base64', dimensions: 2, input_tokens: 4 });
  const buf = Buffer.from(r.data[0]!.embedding as string, 'base64');
  const v = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  t.same([...v].map((x) => +x.toFixed(4)), [0.6, 0.8]);
  const f = embeddingsResponse('e', [[3, 4], [0, 0]], { encoding_format: 'float', input_tokens: 1 });
  const rounded = (f.data[0]!.embedding as number[]).map((x) => +x.toFixed(4));
  t.same(rounded, [0.6, 0.8], 'full-size vectors are unit length too');
  t.same(f.data[1]!.embedding, [0, 0], 'a zero vector stays zero');
  t.same(f.usage, { prompt_tokens: 1, total_tokens: 1 });
  throws422(t, () => normalizeEmbeddings({ model: 'e', input: [] }), 'input');
  throws422(t, () => normalizeEmbeddings({ model: 'e', input: 'x', encoding_format: 'int8' }), 'encoding_format');
});

t.test('runtime parameters: formats, seeds per choice, tools prompt and its cache marker', async (t) => {
  const { generateParams } = await import('../../src/service/compat/run.ts');
  const chat = normalizeChatCompletions({ model: 'm', messages: [user('hi')], n: 2, seed: 10, top_p: 0, response_format: { type: 'json_object' }, stop: ['x'] });
  const p0 = generateParams(chat, 0, {});
  const p1 = generateParams(chat, 1, {});
  t.equal(p0.seed, 10);
  t.equal(p1.seed, 11, 'each choice has its own seed');
  t.equal(p0.temperature, 0, 'top_p 0 is greedy');
  t.equal(p0.top_p, undefined);
  t.same(p0.response_format, { type: 'json_object' });
  t.same(p0.stop, ['x']);
  t.equal(p0.messages![0]!.content, 'hi', 'marker-free content is sent as a string');
  const js = normalizeChatCompletions({ model: 'm', messages: [user('hi')], response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object' } } } });
  t.same(generateParams(js, 0, {}).response_format, { type: 'json_schema', json_schema: { schema: { type: 'object' }, name: 'n' } });
  const msg = normalizeMessages({
    model: 'm', max_tokens: 5,
    tools: [{ name: 'f', input_schema: { type: 'object' }, cache_control: ep }],
    system: [{ type: 'text', text: 'sys', cache_control: ep }],
    messages: [user('q')],
  });
  const pm = generateParams(msg, 0, {});
  const first = pm.messages![0]!.content as Array<{ text: string; cache_control?: unknown }>;
  t.match(first[0]!.text, /"name":"f"/, 'tools described in a system message');
  t.same(first[0]!.cache_control, { type: 'ephemeral' }, 'the tool marker caches through the tool descriptions');
  t.same((pm.messages![1]!.content as Array<{ cache_control?: unknown }>)[0]!.cache_control, { type: 'ephemeral' });
  const none = normalizeChatCompletions({ model: 'm', messages: [user('hi')], tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'none' });
  t.equal(generateParams(none, 0, {}).messages!.length, 1, "tool_choice 'none' adds no tools prompt");
});
