// The ModelRuntime seam over the REAL runtimes with the repository's tiny checkpoints:
// tinystories-656k (decoder, no chat template: the runtime's fallback template applies) and
// gliner2-tiny-span (encoder). A second instance of the decoder, `tinystories-busy`, has a
// scheduler queue of depth 0 so every request to it is refused as overloaded (529).
// Used by the compat SDK tests until/unless src/service/runtime-local.ts is used instead; usage is
// made disjoint (cache reads and writes out of prompt_tokens) at this seam as runtime-local does.
import { join } from 'node:path';
import { loadDecoder, type DecoderModel } from '../../src/runtime/generate.ts';
import { loadEncoder, type EncoderModel } from '../../src/models/encoder/index.ts';
import { disjointUsage } from '../../src/service/runtime-local.ts';
import type { EncoderSchema, ExtractOptions, GenerateEvent, GenerateParams, GenerateUsage, LocalModel, ModelRef, ModelRuntime, ModelStatus } from '../../src/service/runtime.ts';

export const shared = join(import.meta.dirname, '../../../shared');
export const DECODER_DIR = join(shared, 'models/tinystories-656k');
export const ENCODER_DIR = join(shared, 'goldens/gliner2-tiny-span');

export class TinyRuntime implements ModelRuntime {
  decoders = new Map<string, DecoderModel>();
  encoders = new Map<string, EncoderModel>();
  local: LocalModel[] = [];

  static async load(): Promise<TinyRuntime> {
    const rt = new TinyRuntime();
    const dec = await loadDecoder(DECODER_DIR, { kv: { memory: '16MiB', blockSize: 16 }, minCacheTokens: 64 });
    const busy = await loadDecoder(DECODER_DIR, { kv: { memory: '4MiB', blockSize: 16 }, maxQueue: 0 });
    const enc = await loadEncoder(ENCODER_DIR);
    rt.decoders.set('tinystories-656k', dec);
    rt.decoders.set('tinystories-busy', busy);
    rt.encoders.set('gliner2-tiny-span', enc);
    rt.local = [
      { id: 'gliner2-tiny-span', kind: 'encoder', dir: ENCODER_DIR, architecture: 'gliner2' },
      { id: 'tinystories-656k', kind: 'decoder', dir: DECODER_DIR, architecture: 'llama', context_length: dec.info.contextLength },
      { id: 'tinystories-busy', kind: 'decoder', dir: DECODER_DIR, architecture: 'llama', context_length: busy.info.contextLength },
    ];
    return rt;
  }

  async listLocal() { return this.local; }
  status(ref: ModelRef): ModelStatus {
    return this.decoders.has(ref.id) || this.encoders.has(ref.id) ? { state: 'ready' } : { state: 'not_found' };
  }
  async warm() {}
  async extract(ref: ModelRef, texts: string[], schema: EncoderSchema, opts: ExtractOptions) {
    const enc = this.encoders.get(ref.id)!;
    const results = await enc.extract(texts, schema, { threshold: opts.threshold, include_confidence: opts.include_confidence, include_spans: opts.include_spans });
    const input_tokens = texts.reduce((n, t) => n + t.split(/\s+/).filter(Boolean).length, 0);
    return { results: results as unknown as Record<string, unknown>[], input_tokens };
  }
  async *generate(ref: ModelRef, params: GenerateParams): AsyncIterable<GenerateEvent> {
    const dec = this.decoders.get(ref.id)!;
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    try {
      for await (const ev of dec.generate(params as any)) {
        if (ev.type === 'delta') {
          if (ev.prompt_usage) yield { type: 'start', usage: disjointUsage(ev.prompt_usage) };
          yield { type: 'delta', text: ev.text, ...(ev.logprobs ? { logprobs: ev.logprobs } : {}) } as GenerateEvent;
        }
        else {
          const usage = disjointUsage(ev.usage);
          yield { type: 'done', finish_reason: ev.finish_reason, stop_sequence: ev.stop_sequence, usage, text: ev.text };
        }
      }
    } catch (e) {
      // the production seam's contract (runtime-local.ts): a cancelled generation ends with its usage
      const ab = e as { name?: string; usage?: GenerateUsage; text?: string };
      if (ab?.name === 'AbortError' && ab.usage) {
        const usage = disjointUsage(ab.usage);
        yield { type: 'done', finish_reason: 'cancelled', stop_sequence: null, usage, text: ab.text ?? '' };
        return;
      }
      throw e;
    }
  }
  async countTokens(ref: ModelRef, params: GenerateParams) {
    const dec = this.decoders.get(ref.id);
    if (!dec) return (params.prompt ?? '').split(/\s+/).filter(Boolean).length; // as extract() counts
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return (await dec.preparePrompt(params as any)).ids.length;
  }
  async embed(ref: ModelRef, texts: string[]) {
    const dec = this.decoders.get(ref.id);
    const vecs = dec ? await dec.embed(texts) : await this.encoders.get(ref.id)!.embed(texts);
    const input_tokens = dec ? texts.reduce((n, t) => n + dec.tokenizer.encode(t).length, 0) : texts.reduce((n, t) => n + t.split(/\s+/).length, 0);
    return { embeddings: vecs.map((v) => Array.from(v)), input_tokens, dimensions: vecs[0]?.length ?? 0 };
  }
  stats() {
    let q = 0;
    for (const d of this.decoders.values()) q += d.scheduler.stats().waiting;
    return { loaded: [...this.decoders.keys(), ...this.encoders.keys()], warming: [], queue_depth: q };
  }
  async close() {}
}
