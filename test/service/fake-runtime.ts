// Test double of the ModelRuntime seam (tests only). Deterministic: the encoder finds the words of
// a small per-label vocabulary; the decoder echoes the last user message word by word.
import type { EncoderSchema, ExtractOptions, GenerateEvent, GenerateParams, LocalModel, ModelRef, ModelRuntime, ModelStatus } from '../../src/service/runtime.ts';

export const VOCAB: Record<string, string[]> = { person: ['Alice', 'Bob'], city: ['Paris', 'Berlin'], company: ['Acme'] };

export class FakeRuntime implements ModelRuntime {
  states = new Map<string, ModelStatus>();
  local: LocalModel[] = [
    { id: 'test/encoder', kind: 'encoder', dir: '/nonexistent/encoder' },
    { id: 'test/decoder', kind: 'decoder', dir: '/nonexistent/decoder' },
  ];
  warmCalls: string[] = [];
  extractCalls = 0;
  failNext: Error | null = null;
  /** resolves pending warm() calls when set ready */
  private warmers = new Map<string, Array<() => void>>();

  async listLocal() { return this.local; }
  status(ref: ModelRef): ModelStatus {
    const s = this.states.get(ref.id);
    if (s) return s;
    if (this.local.some((m) => m.id === ref.id) || ref.dir) return { state: 'ready' };
    return { state: 'pullable' };
  }
  warm(ref: ModelRef): Promise<void> {
    this.warmCalls.push(ref.id);
    if (this.status(ref).state === 'ready') return Promise.resolve();
    if (!this.states.has(ref.id)) this.states.set(ref.id, { state: 'warming', retry_after_s: 3, progress: 0.5 });
    return new Promise((res) => { const l = this.warmers.get(ref.id) ?? []; l.push(res); this.warmers.set(ref.id, l); });
  }
  /** test control: finish warming a model */
  setReady(id: string) {
    this.states.set(id, { state: 'ready' });
    for (const r of this.warmers.get(id) ?? []) r();
    this.warmers.delete(id);
  }
  async extract(_ref: ModelRef, texts: string[], schema: EncoderSchema, opts: ExtractOptions) {
    this.extractCalls++;
    if (this.failNext) { const e = this.failNext; this.failNext = null; throw e; }
    const results = texts.map((text) => {
      const out: Record<string, unknown> = {};
      if (schema.entities) {
        const ents: Record<string, unknown[]> = {};
        for (const { name } of schema.entities) {
          ents[name] = [];
          for (const w of VOCAB[name] ?? []) {
            let i = text.indexOf(w);
            while (i >= 0) {
              const conf = 0.9;
              if (conf >= opts.threshold) ents[name].push(opts.include_spans || opts.include_confidence ? { text: w, ...(opts.include_confidence ? { confidence: conf } : {}), ...(opts.include_spans ? { start: i, end: i + w.length } : {}) } : w);
              i = text.indexOf(w, i + 1);
            }
          }
        }
        out.entities = ents;
      }
      if (schema.classifications) for (const c of schema.classifications) out[c.task] = c.labels[0];
      return out;
    });
    const input_tokens = texts.reduce((n, t) => n + t.split(/\s+/).filter(Boolean).length, 0) + (schema.entities?.length ?? 0);
    return { results, input_tokens };
  }
  async *generate(_ref: ModelRef, p: GenerateParams): AsyncIterable<GenerateEvent> {
    const last = [...(p.messages ?? [])].reverse().find((m) => m.role === 'user');
    const content = typeof last?.content === 'string' ? last.content : last?.content.map((b) => b.text).join('') ?? p.prompt ?? '';
    const words = content.split(/\s+/).filter(Boolean).slice(0, p.max_tokens ?? 16);
    let text = '';
    for (const w of words) {
      if (p.signal?.aborted) break;
      const d = (text ? ' ' : '') + w;
      text += d;
      yield { type: 'delta', text: d };
    }
    const prompt = (p.messages ?? []).reduce((n, m) => n + (typeof m.content === 'string' ? m.content : m.content.map((b) => b.text).join(' ')).split(/\s+/).filter(Boolean).length, 0);
    yield { type: 'done', finish_reason: words.length === (p.max_tokens ?? 16) ? 'length' : 'stop', text, usage: { prompt_tokens: prompt, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: words.length } };
  }
  async embed(_ref: ModelRef, texts: string[]) { return { embeddings: texts.map((t) => [t.length, 1]), input_tokens: texts.length, dimensions: 2 }; }
  stats() { return { loaded: this.local.map((m) => m.id), warming: [...this.states].filter(([, s]) => s.state === 'warming').map(([k]) => k), queue_depth: 0 }; }
  async close() {}
}
