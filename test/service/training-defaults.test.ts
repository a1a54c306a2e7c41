// Default training settings of the fresh-initialized encoders: each preset gets learning rates it
// trains at (the tiny encoder needs ten times the small one's; the small one diverges at the tiny
// one's). Jobs stay queued here (no training runs); e2e-customization.test.ts trains the tiny
// encoder at these defaults and checks the held-out F1.
import t from 'tap';
import { call, makeUser, startServer } from './helpers.ts';
import { nerLine, uploadDataset } from './customization-helpers.ts';
import { OPEN_RATE_LIMITS } from '../reliability/helpers.ts';

// more job creations than the spec's 20 a minute: this file checks configurations, not limits
const ts = await startServer({ config: { trainingConcurrency: 0, rateLimits: OPEN_RATE_LIMITS } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });
const NER = [
  nerLine('Alice lives in Paris .', [['Alice', 'person'], ['Paris', 'city']]),
  nerLine('Bob flew to Rome .', [['Bob', 'person'], ['Rome', 'city']]),
].join('\n') + '\n';
t.equal((await uploadDataset(ts.url, u.key, 'ner', 'ner', 'a.jsonl', NER)).body.status, 'ready');
const CLS = ['great film', 'dull film', 'loved it', 'hated it']
  .map((text, i) => JSON.stringify({ text, label: i % 2 ? 'negative' : 'positive' })).join('\n') + '\n';

async function configuration(body: Record<string, unknown>) {
  const job = { datasets: [{ name: 'ner' }], training_type: 'full', ...body };
  const r = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: job });
  t.equal(r.status, 200, r.text);
  return (await call(ts.url, 'GET', `/felix/training-jobs/${r.body.id}`, { key: u.key })).body.configuration;
}

t.test('fresh encoders: learning rates by preset', async (t) => {
  const tiny = await configuration({ base_model: 'loom/gliner2-init-tiny' });
  t.match(tiny, { nr_epochs: 10, learning_rate: 5e-3, encoder_learning_rate: 1e-3, batch_size: 8 });
  const small = await configuration({ base_model: 'loom/gliner2-init-small' });
  t.match(small, { nr_epochs: 10, learning_rate: 2e-3, encoder_learning_rate: 5e-4, batch_size: 16 });
  // the fresh-encoder recipe (issue 17) is the default and shows in the configuration: the small preset trains
  // with dropout inside the encoder, the tiny one (which underfits) without
  t.match(tiny, { hidden_dropout: 0, attention_dropout: 0, piece_dropout: 0, negative_span_keep: 0.5,
    negative_span_hard: 'none' });
  const recipe = {
    hidden_dropout: 0.1, attention_dropout: 0.1, word_dropout: 0, piece_dropout: 0.25, negative_labels: 16,
    full_label_ratio: 0, negative_span_keep: 'balanced', negative_span_hard: 'auto',
    classifier_prior_init: true, classification_loss: 'softmax',
  };
  t.match(small, { selection_metric: 'task' });
  t.match(small, { ...recipe, max_minutes: null });
  const timed = await configuration({
    base_model: 'loom/gliner2-init-small', max_minutes: 20, hidden_dropout: 0.2, negative_labels: 8,
    full_label_ratio: 0,
  });
  t.match(timed, { max_minutes: 20, hidden_dropout: 0.2, attention_dropout: 0.1, negative_labels: 8 });
  t.match(timed, { full_label_ratio: 0 });
  // data of classification records only: the small preset's classification settings (FRESH_CLASSIFICATION_SETTINGS)
  t.equal((await uploadDataset(ts.url, u.key, 'cls', 'classification', 'c.jsonl', CLS)).body.status, 'ready');
  const cls = await configuration({ base_model: 'loom/gliner2-init-small', datasets: [{ name: 'cls' }] });
  t.match(cls, { learning_rate: 1e-3, encoder_learning_rate: 2e-4, batch_size: 8, hidden_dropout: 0 });
  t.match(cls, { attention_dropout: 0, full_label_ratio: 0, piece_dropout: 0, negative_span_keep: 0.5,
    negative_span_hard: 'none' });
  const both = await configuration({ base_model: 'loom/gliner2-init-small', datasets: [{ name: 'cls' }, { name: 'ner' }] });
  t.match(both, { learning_rate: 2e-3, batch_size: 16, hidden_dropout: 0.1, piece_dropout: 0.25 },
    'any entity data: the NER settings');
  // a fresh base trains in full by default (its weights are random: nothing for LoRA to adapt); lora is refused
  const plain = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key, body: { base_model: 'loom/gliner2-init-small', datasets: [{ name: 'ner' }] },
  });
  t.equal(plain.status, 200, plain.text);
  const shown = await call(ts.url, 'GET', `/felix/training-jobs/${plain.body.id}`, { key: u.key });
  t.equal(shown.body.training_type, 'full');
  const lora = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key, body: { base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'ner' }], training_type: 'lora' },
  });
  t.equal(lora.status, 422);
  t.match(lora.body, { detail: /freshly initialized/, errors: [{ path: '/training_type', keyword: 'lora_on_fresh' }] });
  // the prior init shifts a fully trained classifier: a LoRA job shows false, and asking for it is a 422
  const loraJob = (body: Record<string, unknown>) => call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key, body: { base_model: 'test/encoder', datasets: [{ name: 'ner' }], training_type: 'lora', ...body },
  });
  const lj = await loraJob({});
  t.equal(lj.status, 200, lj.text);
  const ljShown = await call(ts.url, 'GET', `/felix/training-jobs/${lj.body.id}`, { key: u.key });
  t.equal(ljShown.body.configuration.classifier_prior_init, false);
  t.match((await loraJob({ classifier_prior_init: true })).body,
    { errors: [{ path: '/classifier_prior_init', keyword: 'prior_init_with_lora' }] });
  // what the caller sets wins
  const set = await configuration({ base_model: 'loom/gliner2-init-tiny', learning_rate: 1e-3, encoder_learning_rate: 2e-4 });
  t.match(set, { learning_rate: 1e-3, encoder_learning_rate: 2e-4 });
  // a pretrained encoder keeps its fine-tuning defaults
  const pre = await configuration({ base_model: 'test/encoder' });
  t.match(pre, { nr_epochs: 3, learning_rate: 5e-4, encoder_learning_rate: 1e-5 });
  t.match(pre, { hidden_dropout: 0, negative_labels: 16, selection_metric: 'task', classifier_prior_init: false });
  t.match(pre, { classification_loss: 'bce' }, 'a pretrained GLiNER2 base keeps the library\'s BCE');
  t.match(await configuration({ base_model: 'test/encoder', classification_loss: 'softmax' }),
    { classification_loss: 'softmax' });
  // weight averaging (EMA) is off unless a job asks for it
  t.match(pre, { ema_decay: 0, rare_word_dropout: 0, mention_replacement: 0, mention_dropout: 0, hard_negatives: 0,
    negative_span_keep: 0.5, negative_span_hard: 'none' });
  t.match(await configuration({ base_model: 'test/encoder', negative_span_hard: 'label' }),
    { negative_span_hard: 'label' });
  t.match(await configuration({ base_model: 'test/encoder', hard_negatives: 0.5 }), { hard_negatives: 0.5 });
  t.match(await configuration({ base_model: 'test/encoder', rare_word_dropout: 0.5 }), { rare_word_dropout: 0.5 });
  t.match(pre, { piece_dropout: 0 });
  t.match(await configuration({ base_model: 'test/encoder', piece_dropout: 0.1 }), { piece_dropout: 0.1 });
  t.match(await configuration({ base_model: 'test/encoder', mention_replacement: 0.3 }), { mention_replacement: 0.3 });
  t.match(await configuration({ base_model: 'test/encoder', ema_decay: 0.999 }), { ema_decay: 0.999 });
  // compute precision (issue 17): bf16 where the CPU has AVX512_BF16 unless the job says otherwise
  t.match(small, { precision: 'auto' });
  t.match(await configuration({ base_model: 'test/encoder', precision: 'bf16' }), { precision: 'bf16' });
  t.match(await configuration({ base_model: 'test/encoder', precision: 'fp32' }), { precision: 'fp32' });
  // decoders too (their base weights' products)
  const CHAT = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n';
  t.equal((await uploadDataset(ts.url, u.key, 'chat', 'decoder', 'c.jsonl', CHAT)).body.status, 'ready');
  const dec = async (body: Record<string, unknown>) => {
    const r = await call(ts.url, 'POST', '/felix/training-jobs', {
      key: u.key, body: { base_model: 'test/decoder', datasets: [{ name: 'chat' }], ...body },
    });
    t.equal(r.status, 200, r.text);
    return (await call(ts.url, 'GET', `/felix/training-jobs/${r.body.id}`, { key: u.key })).body.configuration;
  };
  t.match(await dec({}), { precision: 'auto' });
  t.match(await dec({ precision: 'bf16' }), { precision: 'bf16' });
});

t.test('recipe fields out of range are a 422', async (t) => {
  const bads = [{ hidden_dropout: 1 }, { word_dropout: -0.1 }, { negative_labels: 1.5 }, { selection_metric: 'f1' },
    { max_minutes: 0 }, { full_label_ratio: 1.5 }, { precision: 'fp16' }, { classifier_prior_init: 'yes' },
    { classification_loss: 'hinge' }, { ema_decay: 1 }, { ema_decay: -0.5 }, { piece_dropout: 0.95 },
    { rare_word_dropout: 1 }, { mention_replacement: 1.5 }, { hard_negatives: -0.5 }, { negative_span_keep: 0 },
    { mention_dropout: 1 }, { negative_span_keep: 'auto' }, { negative_span_hard: 'all' }];
  for (const bad of bads) {
    const body = { base_model: 'loom/gliner2-init-small', datasets: [{ name: 'ner' }], training_type: 'full', ...bad };
    const r = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body });
    t.equal(r.status, 422, JSON.stringify(bad));
  }
});
