// The training charts' data: metrics parsed from the trainers' own step log lines (sft, and the dpo /
// grpo formats of the rl trainers), checkpoint notes ignored, series aligned by step.
import t from 'tap';
import { curves, metricsOf } from '../../dashboard/src/metrics.ts';

t.test('step lines of each trainer', async (t) => {
  t.same(metricsOf('epoch 1 step 3/30: train_loss 12.3025 val_loss 8.2610 (1610 tokens/s)'), {
    step: 3,
    values: { train_loss: 12.3025, val_loss: 8.261 },
  });
  t.same(
    metricsOf('epoch 1 step 4/30: train_loss 0.5 (900 tokens/s)'),
    { step: 4, values: { train_loss: 0.5 } },
    'no validation split',
  );
  t.same(
    metricsOf(
      'step 8: loss 0.6900, rewards/chosen 0.0100, rewards/rejected -0.0200, rewards/margin 0.0300, ' +
        'rewards/accuracy 0.500',
    ),
    {
      step: 8,
      values: {
        loss: 0.69,
        'rewards/chosen': 0.01,
        'rewards/rejected': -0.02,
        'rewards/margin': 0.03,
        'rewards/accuracy': 0.5,
      },
    },
  );
  t.same(metricsOf('step 4: loss 0.1000, reward mean 0.4000, reward std 0.2000, kl 0.00100, completion length 12.0'), {
    step: 4,
    values: { loss: 0.1, 'reward mean': 0.4, 'reward std': 0.2 },
  });
});

t.test('other lines are not points', async (t) => {
  t.equal(metricsOf('checkpoint at epoch 1, step 3, validation loss 8.2610 (best so far)'), null);
  t.equal(metricsOf('training complete: validation F1 0.6667, precision 0.5000, recall 1.0000 (5 examples)'), null);
  t.equal(metricsOf('epoch 2 step 6/30: 1200 tokens/s'), null);
});

t.test('series by step, gaps where a metric is missing', async (t) => {
  const pts = [
    'epoch 1 step 2/6: train_loss 3 val_loss 4',
    'checkpoint at epoch 1, step 2, validation loss 4',
    'epoch 1 step 4/6: train_loss 2',
    'epoch 2 step 6/6: train_loss 1 val_loss 2',
  ]
    .map(metricsOf)
    .filter((p) => p !== null);
  t.same(
    curves(pts, (n) => n.includes('loss')),
    {
      x: [2, 4, 6],
      series: [
        { label: 'train_loss', values: [3, 2, 1] },
        { label: 'val_loss', values: [4, null, 2] },
      ],
    },
  );
  t.same(
    curves(pts, (n) => n.includes('reward')),
    { x: [], series: [] },
  );
});
