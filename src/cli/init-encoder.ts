// `loom init-encoder --config small|base|tiny|<json file> --data <jsonl> --out <dir> [--seed n] [--vocab n]
//  [--word-features shape|shape,suffix:N|suffix:N|none] [--label-isolation on|off] [--label-bag on|off]
//  [--token-pooling mean|first|max]`
// A fresh GLiNER2 span model (random init as the reference does) with a WordPiece tokenizer built
// from the training text, in the real checkpoint layout.
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  initEncoder, ENCODER_PRESETS, TOKEN_POOLING_OPTIONS, type EncoderInitConfig,
} from '../training/encoder/init.ts';
import type { TokenPooling } from '../models/encoder/gliner2.ts';
import { parseJsonl } from '../training/data/formats.ts';
import { parseWordFeatureSpec } from '../models/encoder/word-features.ts';

const HELP = `usage: loom init-encoder --config small|base|tiny|<config.json> --data <train.jsonl> --out <dir>
  [--seed 42] [--vocab N]
  [--word-features shape|shape,suffix:N|suffix:N|none]   (default: shape; docs/training.md)
  [--label-isolation on|off]   (default: on; docs/training.md)
  [--label-bag on|off]   (a classification label as one [L] token holding its name's pieces; default: on)
  [--token-pooling mean|first|max]   (a word's vector from its pieces; default: mean; docs/training.md)`;

export async function main(argv: string[]): Promise<number> {
  const options = {
    config: { type: 'string', default: 'small' }, data: { type: 'string' }, out: { type: 'string' },
    seed: { type: 'string', default: '42' }, vocab: { type: 'string' }, 'word-features': { type: 'string' },
    'label-isolation': { type: 'string' }, 'label-bag': { type: 'string' }, 'token-pooling': { type: 'string' },
    help: { type: 'boolean' },
  } as const;
  const { values } = parseArgs({ args: argv, options });
  if (values.help) return (console.log(HELP), 0);
  if (!values.data || !values.out) return (console.error(HELP), 2);
  let cfg: EncoderInitConfig;
  if (ENCODER_PRESETS[values.config!]) cfg = { ...ENCODER_PRESETS[values.config!] };
  else if (existsSync(values.config!)) cfg = JSON.parse(readFileSync(values.config!, 'utf8'));
  else return (console.error(`init-encoder: --config must be ${Object.keys(ENCODER_PRESETS).join('|')} or a JSON file`), 2);
  if (values.vocab) cfg.vocab_size = Number(values.vocab);
  if (values['word-features'] !== undefined) {
    try {
      cfg.word_features = parseWordFeatureSpec(values['word-features']);
    } catch (e) {
      return (console.error(`init-encoder: --word-features: ${(e as Error).message}`), 2);
    }
  }
  const iso = values['label-isolation'];
  if (iso !== undefined && iso !== 'on' && iso !== 'off')
    return (console.error('init-encoder: --label-isolation takes on or off'), 2);
  if (iso !== undefined) cfg.label_isolation = iso === 'on';
  const bag = values['label-bag'];
  if (bag !== undefined && bag !== 'on' && bag !== 'off')
    return (console.error('init-encoder: --label-bag takes on or off'), 2);
  if (bag !== undefined) cfg.label_bag = bag === 'on';
  const pooling = values['token-pooling'];
  if (pooling !== undefined && !TOKEN_POOLING_OPTIONS.includes(pooling as TokenPooling))
    return (console.error(`init-encoder: --token-pooling takes ${TOKEN_POOLING_OPTIONS.join(', ')}`), 2);
  if (pooling !== undefined) cfg.token_pooling = pooling as TokenPooling;
  const texts: string[] = [];
  for (const r of parseJsonl(readFileSync(values.data, 'utf8'))) {
    if ('text' in r && typeof r.text === 'string') texts.push(r.text);
    else if (r.kind === 'chat') for (const m of r.messages) texts.push(m.content);
  }
  const res = initEncoder(values.out, cfg, texts, { seed: Number(values.seed) });
  console.log(`wrote ${res.dir}: ${res.parameters.toLocaleString()} parameters, vocabulary ${res.vocabSize}`);
  return 0;
}
