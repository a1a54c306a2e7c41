import t from 'tap';
import { join } from 'node:path';
import { Tokenizer } from '../../src/tokenize/tokenizer.ts';
import { ChatTemplateError, encodeChat, renderChat, renderChatWithBreakpoints } from '../../src/tokenize/chat-template.ts';

const shared = join(import.meta.dirname, '..', '..', '..', 'shared');
const mzDir = join(shared, 'models/minueza-32m-ultrachat-tokenizer');

t.test('renders the real ChatML template of minueza', async (t) => {
  const tok = await Tokenizer.fromDir(mzDir);
  const msgs = [
    { role: 'system' as const, content: 'Be brief.' },
    { role: 'user' as const, content: [{ type: 'text', text: 'Hi' }, { type: 'text', text: 'there' }] },
  ];
  t.equal(renderChat(tok, msgs), '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n');
  t.equal(renderChat(tok, msgs, { addGenerationPrompt: false }), '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n');
  const { ids } = encodeChat(tok, msgs);
  t.equal(ids[0], 32001, 'starts with <|im_start|> (no BOS: add_bos_token false)');
  t.equal(ids.filter((i) => i === 32000).length, 2);
});

t.test('fallback template for models without one; bos-in-template handling', async (t) => {
  const tok = await Tokenizer.fromDir(join(shared, 'models/tinystories-656k'));
  t.equal(tok.chatTemplate, undefined);
  t.equal(renderChat(tok, [{ role: 'user', content: 'Tell a story' }]), 'User: Tell a story\n\nAssistant:');
  const { ids } = encodeChat(tok, [{ role: 'user', content: 'Tell a story' }]);
  t.equal(ids[0], 1, 'BOS added by the post-processor');
  const src = { chatTemplate: '{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}', bosToken: '<s>', eosToken: '</s>' };
  t.equal(renderChat(src, [{ role: 'user', content: 'x' }]), '<s>[user] x');
});

t.test('breakpoints: char offsets at the end of cache_control blocks, token counts are prefixes', async (t) => {
  const tok = await Tokenizer.fromDir(mzDir);
  const msgs = [
    { role: 'system' as const, content: [{ type: 'text', text: 'You are a long system prompt.', cache_control: { type: 'ephemeral' as const } }] },
    { role: 'user' as const, content: 'First question', cache_control: { type: 'ephemeral' as const } },
    { role: 'assistant' as const, content: 'Answer' },
    { role: 'user' as const, content: 'Second' },
  ];
  const { text, breakpoints } = renderChatWithBreakpoints(tok, msgs);
  t.equal(text, renderChat(tok, msgs), 'sentinels removed');
  t.equal(breakpoints.length, 2);
  t.equal(text.slice(0, breakpoints[0]), '<|im_start|>system\nYou are a long system prompt.');
  t.ok(text.slice(0, breakpoints[1]).endsWith('First question'));
  const enc = encodeChat(tok, msgs);
  for (const [i, k] of enc.breakpointTokens.entries()) {
    const pre = tok.encode(text.slice(0, breakpoints[i]));
    t.same(enc.ids.slice(0, k), pre.slice(0, k), 'breakpoint tokens are a prefix of the full encoding');
    t.ok(pre.length - k <= 1, 'at most one straddling token excluded');
  }
});

t.test('errors are clear', async (t) => {
  const tok = await Tokenizer.fromDir(mzDir);
  t.throws(() => renderChat(tok, []), ChatTemplateError);
  t.throws(() => renderChat(tok, [{ role: 'robot' as 'user', content: 'x' }]), /role/);
  t.throws(() => renderChat(tok, [{ role: 'user', content: [{ type: 'image', url: 'x' }] }]), /image/);
  const strict = { chatTemplate: "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok" };
  t.throws(() => renderChat(strict, [{ role: 'assistant', content: 'x' }]), /first must be user/);
  t.throws(() => renderChat({ chatTemplate: '{% for %}' }, [{ role: 'user', content: 'x' }]), /does not parse/);
});
