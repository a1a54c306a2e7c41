// Tool calling through the compat endpoints, with the official SDKs. The tiny checkpoint never
// emits tool calls, so the decoder here is a scripted test double of the ModelRuntime seam that
// answers like a tool-trained model (Hermes `<tool_call>` format) whenever the prompt offers
// tools; it also records what the adapters passed to the runtime.
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, makeUser } from '../service/helpers.ts';
import type { GenerateEvent, GenerateParams, ModelRef, ModelRuntime } from '../../src/service/runtime.ts';

const CALL = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>';
const seen: GenerateParams[] = [];

class ScriptedRuntime implements ModelRuntime {
  async listLocal() { return [{ id: 'scripted', kind: 'decoder' as const, dir: '/nonexistent', context_length: 4096 }]; }
  status(ref: ModelRef) { return ref.id === 'scripted' ? { state: 'ready' as const } : { state: 'not_found' as const }; }
  async warm() {}
  async extract(): Promise<never> { throw new Error('no encoder'); }
  async *generate(_ref: ModelRef, p: GenerateParams): AsyncIterable<GenerateEvent> {
    seen.push(p);
    const sys = JSON.stringify(p.messages ?? []);
    const answeredTool = (p.messages ?? []).some((m) => m.role === 'tool');
    const text = sys.includes('get_weather') && !answeredTool ? CALL : 'It is sunny.';
    for (let i = 0; i < text.length; i += 7) yield { type: 'delta', text: text.slice(i, i + 7) };
    yield { type: 'done', finish_reason: 'stop', text, usage: { prompt_tokens: 50, completion_tokens: 20, cache_read_tokens: 0, cache_write_tokens: 0 } };
  }
  async embed(): Promise<never> { throw new Error('no embeddings'); }
  stats() { return { loaded: ['scripted'], warming: [], queue_depth: 0 }; }
  async close() {}
}

const ts = await startServer({ runtime: new ScriptedRuntime() });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });
const oai = new OpenAI({ apiKey: u.key, baseURL: `${ts.url}/v1`, maxRetries: 0 });
const ant = new Anthropic({ apiKey: u.key, baseURL: ts.url, maxRetries: 0 });
const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

t.test('chat: tool_calls parsed, finish_reason tool_calls, round trip with a tool message', async (t) => {
  const r = await oai.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools });
  const c = r.choices[0]!;
  t.equal(c.finish_reason, 'tool_calls');
  t.equal(c.message.content, 'Let me check.');
  const call = c.message.tool_calls![0]! as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
  t.equal(call.type, 'function');
  t.equal(call.function.name, 'get_weather');
  t.same(JSON.parse(call.function.arguments), { city: 'Paris' });
  t.match(call.id, /^call_/);
  t.match(JSON.stringify(seen.at(-1)!.messages![0]), /get_weather/, 'the tools are described to the model');
  const r2 = await oai.chat.completions.create({
    model: 'scripted',
    messages: [{ role: 'user', content: 'Weather in Paris?' }, c.message, { role: 'tool', tool_call_id: call.id, content: '21C sunny' }],
    tools,
  });
  t.equal(r2.choices[0]!.message.content, 'It is sunny.');
  t.equal(r2.choices[0]!.finish_reason, 'stop');
  const none = await oai.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'hi' }], tools, tool_choice: 'none' });
  t.notOk(none.choices[0]!.message.tool_calls, "tool_choice 'none' offers no tools");
});

t.test('chat streaming: the call text is held back and sent as tool_calls deltas', async (t) => {
  const s = await oai.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, stream: true });
  let content = '';
  let args = '';
  let name = '';
  let finish = '';
  for await (const ch of s) {
    const d = ch.choices[0]?.delta;
    content += d?.content ?? '';
    for (const tc of d?.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      args += tc.function?.arguments ?? '';
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  t.equal(content.trim(), 'Let me check.', 'no tool-call markup leaks into content');
  t.equal(name, 'get_weather');
  t.same(JSON.parse(args), { city: 'Paris' });
  t.equal(finish, 'tool_calls');
});

t.test('messages: tool_use blocks, stop_reason tool_use, streamed input_json', async (t) => {
  const req = { model: 'scripted', max_tokens: 50, tools: [{ name: 'get_weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }], messages: [{ role: 'user' as const, content: 'Weather?' }] };
  const m = await ant.messages.create(req);
  t.equal(m.stop_reason, 'tool_use');
  const tu = m.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
  t.equal(tu.name, 'get_weather');
  t.same(tu.input, { city: 'Paris' });
  t.match(tu.id, /^toolu_/);
  const final = await ant.messages.stream(req).finalMessage();
  const stu = final.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock;
  t.same(stu.input, { city: 'Paris' }, 'the SDK assembles input_json_delta');
  t.equal(final.stop_reason, 'tool_use');
  const back = await ant.messages.create({
    ...req,
    messages: [...req.messages, { role: 'assistant', content: m.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: '21C' }] }],
  });
  t.equal(back.stop_reason, 'end_turn');
  t.same(back.content, [{ type: 'text', text: 'It is sunny.' }]);
});

t.test('responses: function_call output items, also when streamed', async (t) => {
  const rtools: OpenAI.Responses.Tool[] = [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];
  const r = await oai.responses.create({ model: 'scripted', input: 'Weather?', tools: rtools });
  const fc = r.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
  t.equal(fc.name, 'get_weather');
  t.same(JSON.parse(fc.arguments), { city: 'Paris' });
  const final = await oai.responses.stream({ model: 'scripted', input: 'Weather?', tools: rtools }).finalResponse();
  const sfc = final.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall;
  t.same(JSON.parse(sfc.arguments), { city: 'Paris' });
});

t.test('forced tool choice is decoded under a JSON schema', async (t) => {
  await oai.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'x' }], tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } }).catch(() => {});
  const rf = seen.at(-1)!.response_format as { type: string; json_schema: { schema: { properties: { name: unknown } } } };
  t.equal(rf.type, 'json_schema');
  t.same(rf.json_schema.schema.properties.name, { const: 'get_weather' });
});
