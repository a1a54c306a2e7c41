// The production ModelRuntime: models under LOOM_MODELS_DIR (Hugging Face layout, `<name>/` or
// `<org>/<name>/`), loaded lazily on first use, at most `maxLoaded` at once (least recently used is
// dropped). A model on disk loads inside the first request (concurrent requests share the load);
// a catalog model not on disk (nor in the Hugging Face cache) is pulled through src/runtime/hub.ts
// and reports `warming` (425 + Retry-After, with progress) while it pulls and loads; a failed pull
// answers 503 for a minute. The native modules are imported lazily, so a build without them still
// serves everything else and answers with the error here.
//
// GGUF files are models too: a `*.gguf` file in the models folder is listed as its file name without
// `.gguf`, a folder (or a cached Hugging Face snapshot) without config.json that holds exactly one `*.gguf`
// file as the folder's id; the decoder config comes from the file's metadata (src/formats/gguf.ts, imported
// lazily as it needs the native addon) and `dir` is the file itself, which loadDecoder opens.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { EncoderModel } from '../models/encoder/index.ts';
import type { DecoderModel } from '../runtime/generate.ts';
import { cachedSnapshot, pullModel } from '../runtime/hub.ts';
import { type DecoderConfig, parseDecoderConfig } from '../formats/hf-config.ts';
import type { EmbedOutput, EncoderSchema, ExtractOptions, ExtractOutput, GenerateEvent, GenerateParams, LocalModel, ModelKind, ModelRef, ModelRuntime, ModelStatus } from './runtime.ts';

interface Loaded { kind: ModelKind; enc?: EncoderModel; dec?: DecoderModel; adapter?: string; lastUsed: number }

type DetectedKind = { kind: ModelKind; architecture: string; context_length?: number };

/**
 * Encoder or decoder, from a checkpoint's config.json (null: not a model we serve). A decoder is
 * listed only when the loader accepts its config: src/formats/hf-config.ts (`parseDecoderConfig`)
 * holds the one table of supported architectures, so the catalog never offers a folder that fails
 * to load (e.g. phi3, gemma).
 */
export function detectKind(dir: string): (DetectedKind & { file?: string }) | null {
  if (dir.endsWith('.gguf')) return detectGguf(dir);
  const p = join(dir, 'config.json');
  if (!existsSync(p)) {
    const files = ggufFiles(dir);
    const k = files.length === 1 ? detectGguf(files[0]) : null;
    return k && { ...k, file: files[0] };
  }
  let cfg: Record<string, unknown>;
  try { cfg = JSON.parse(readFileSync(p, 'utf8')); } catch { return null; }
  const archs = (cfg.architectures as string[] | undefined) ?? [];
  if (archs.includes('GLiNER2') || cfg.model_type === 'extractor' || existsSync(join(dir, 'encoder_config'))) {
    return { kind: 'encoder', architecture: 'gliner2', context_length: typeof cfg.max_len === 'number' ? cfg.max_len : undefined };
  }
  let dec: DecoderConfig;
  try { dec = parseDecoderConfig(cfg, p); } catch { return null; }
  return { kind: 'decoder', architecture: dec.modelType, context_length: dec.maxPositionEmbeddings };
}

let gguf: typeof import('../formats/gguf.ts') | null = null;
/** Settles when the GGUF reader is imported (or failed to: no native addon, so no GGUF models). */
export const ggufReaderReady: Promise<void> = import('../formats/gguf.ts').then((m) => { gguf = m; }, () => {});
const ggufSeen = new Map<string, { stamp: string; kind: ReturnType<typeof detectGguf> }>();

/** A catalog entry for a detected model. */
function listed(id: string, dir: string, k: DetectedKind): LocalModel {
  return { id, kind: k.kind, dir, architecture: k.architecture, context_length: k.context_length };
}

/** The `*.gguf` files directly in a folder (sorted); [] when it is not a readable folder. */
function ggufFiles(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => n.endsWith('.gguf') && !n.startsWith('.')).sort().map((n) => join(dir, n))
      .filter((f) => statSync(f).isFile());
  } catch { return []; }
}

/** A GGUF file's kind from its metadata (a decoder the loader accepts, else null); cached by size and mtime. */
function detectGguf(file: string): DetectedKind | null {
  if (!gguf) return null;
  let stamp: string;
  try {
    const st = statSync(file);
    if (!st.isFile()) return null;
    stamp = `${st.size}:${st.mtimeMs}`;
  } catch { return null; }
  const hit = ggufSeen.get(file);
  if (hit?.stamp === stamp) return hit.kind;
  let kind: ReturnType<typeof detectGguf> = null;
  try {
    const f = new gguf.GgufFile(file);
    const dec = parseDecoderConfig(gguf.ggufToHfConfig(f.metadataObject()), file);
    kind = { kind: 'decoder', architecture: dec.modelType, context_length: dec.maxPositionEmbeddings };
  } catch { kind = null; }
  ggufSeen.set(file, { stamp, kind });
  return kind;
}

/**
 * The decoder runtime reports `prompt_tokens` as the whole prompt, cache hits and writes included
 * (measured: a repeated 17-token prompt reports prompt 17 with cache_read 16). The service's usage
 * is disjoint as the spec's section 2 requires (total = the sum of the four), so the cached parts
 * are taken out of prompt_tokens here, at the seam.
 */
export function disjointUsage(u: { prompt_tokens: number; completion_tokens: number; cache_read_tokens: number; cache_write_tokens: number }) {
  return {
    prompt_tokens: Math.max(0, u.prompt_tokens - u.cache_read_tokens - u.cache_write_tokens),
    cache_read_tokens: u.cache_read_tokens,
    cache_write_tokens: u.cache_write_tokens,
    completion_tokens: u.completion_tokens,
  };
}

/** A chat template renders tool definitions itself when it reads the `tools` variable. */
export function chatTemplateUsesTools(template: string | undefined): boolean {
  return !!template && /\btools\b/.test(template);
}

export interface LocalRuntimeOptions {
  modelsDir: string;
  maxLoaded?: number;
  retryAfterS?: number;
  /** bf16 weights for encoders (half the memory traffic) */
  encoderDtype?: 'f32' | 'bf16';
}

export function createLocalRuntime(opts: LocalRuntimeOptions): ModelRuntime {
  const maxLoaded = Math.max(1, opts.maxLoaded ?? 4);
  const retryAfter = opts.retryAfterS ?? 5;
  const loaded = new Map<string, Loaded>();
  const loading = new Map<string, Promise<Loaded>>();
  const pulls = new Map<string, { state: 'pulling' | 'failed'; error?: string; at: number; progress?: number }>();
  let local: LocalModel[] = [];
  let scannedAt = 0;
  let inflight = 0;

  function scan(): LocalModel[] {
    if (Date.now() - scannedAt < 1000) return local;
    const out: LocalModel[] = [];
    const visit = (dir: string, id: string, depth: number) => {
      const k = id ? detectKind(dir) : null;
      if (k) { out.push(listed(id, k.file ?? dir, k)); return; }
      if (depth >= 2) return;
      for (const name of readdirSync(dir)) {
        if (name.startsWith('.')) continue;
        const sub = join(dir, name);
        try {
          if (statSync(sub).isDirectory()) visit(sub, id ? `${id}/${name}` : name, depth + 1);
          else if (name.endsWith('.gguf')) {  // a GGUF file: a model named after the file
            const g = detectGguf(sub);
            const gid = (id ? `${id}/` : '') + basename(name, '.gguf');
            if (g) out.push(listed(gid, sub, g));
          }
        } catch { /* vanished */ }
      }
    };
    if (existsSync(opts.modelsDir)) visit(opts.modelsDir, '', 0);
    local = out;
    scannedAt = Date.now();
    return out;
  }

  const keyOf = (ref: ModelRef) => ref.id;
  /** pulled (or found in the HF cache) snapshot folders by model id */
  const snapshots = new Map<string, string>();
  function dirOf(id: string): string | undefined {
    const local = scan().find((m) => m.id === id)?.dir ?? snapshots.get(id);
    if (local) return local;
    if (!/^[\w.-]+\/[\w.-]+$/.test(id)) return undefined;
    try {
      const snap = cachedSnapshot(id);
      const k = snap ? detectKind(snap) : null;
      if (snap && k) { const d = k.file ?? snap; snapshots.set(id, d); return d; }
    } catch { /* not a cached repository */ }
    return undefined;
  }

  function evict(): void {
    while (loaded.size > maxLoaded) {
      let oldest: [string, Loaded] | null = null;
      for (const e of loaded) if (!oldest || e[1].lastUsed < oldest[1].lastUsed) oldest = e;
      if (!oldest) return;
      loaded.delete(oldest[0]);
      const m = (oldest[1].enc ?? oldest[1].dec) as unknown as { dispose?: () => void; close?: () => void };
      m?.dispose?.() ?? m?.close?.();
    }
  }

  async function load(ref: ModelRef): Promise<Loaded> {
    await ggufReaderReady;
    const k = keyOf(ref);
    const hit = loaded.get(k);
    if (hit) { hit.lastUsed = Date.now(); return hit; }
    let p = loading.get(k);
    if (!p) {
      p = (async (): Promise<Loaded> => {
        let dir = ref.dir;
        let adapterDir: string | undefined;
        if (ref.weights === 'adapter' && ref.base_model) {
          adapterDir = ref.dir;
          dir = ref.base_dir ?? dirOf(ref.base_model);
          if (!dir) throw new Error(`base model ${ref.base_model} of ${ref.id} is not on disk`);
        }
        dir ??= dirOf(ref.id);
        if (!dir) throw new Error(`model ${ref.id} is not on disk`);
        let l: Loaded;
        if (ref.kind === 'encoder') {
          const { loadEncoder } = await import('../models/encoder/index.ts');
          l = { kind: 'encoder', enc: await loadEncoder(dir, { dtype: opts.encoderDtype }), lastUsed: Date.now() };
        } else {
          const { loadDecoder } = await import('../runtime/generate.ts');
          const dec = await loadDecoder(dir, { id: ref.id });
          if (adapterDir) dec.loadAdapter(ref.id, adapterDir);
          l = { kind: 'decoder', dec, adapter: adapterDir ? ref.id : undefined, lastUsed: Date.now() };
        }
        loaded.set(k, l);
        evict();
        return l;
      })().finally(() => loading.delete(k));
      loading.set(k, p);
    }
    return p;
  }

  async function pull(ref: ModelRef): Promise<void> {
    const k = keyOf(ref);
    const cur = pulls.get(k);
    if (cur?.state === 'pulling') return;
    pulls.set(k, { state: 'pulling', at: Date.now() });
    try {
      const snap = await pullModel(ref.id, { onProgress: (p) => { const s = pulls.get(k); if (s && p.total) s.progress = p.bytes / p.total; } });
      snapshots.set(ref.id, snap);
      await load(ref);
      pulls.delete(k);
    } catch (e) {
      pulls.set(k, { state: 'failed', error: (e as Error).message, at: Date.now() });
      throw e;
    }
  }

  async function use<T>(ref: ModelRef, fn: (l: Loaded) => Promise<T>): Promise<T> {
    inflight++;
    try { return await fn(await load(ref)); } finally { inflight--; }
  }

  return {
    async listLocal() {
      await ggufReaderReady;
      const out = [...scan()];
      for (const [id, dir] of snapshots) {
        const k = detectKind(dir);
        if (k && !out.some((m) => m.id === id)) out.push(listed(id, k.file ?? dir, k));
      }
      return out;
    },

    status(ref: ModelRef): ModelStatus {
      const k = keyOf(ref);
      if (loaded.has(k)) return { state: 'ready' };
      const p = pulls.get(k);
      if (p?.state === 'pulling') return { state: 'warming', retry_after_s: retryAfter, progress: p.progress };
      if (p?.state === 'failed' && Date.now() - p.at < 60_000) return { state: 'unavailable', reason: `pull of ${ref.id} failed: ${p.error}` };
      if (ref.dir) return existsSync(ref.dir) ? { state: 'ready' } : { state: 'not_found' };
      // on disk: loads inside the request (concurrent callers share the load)
      if (dirOf(ref.id)) return { state: 'ready' };
      return { state: 'pullable' };
    },

    async warm(ref: ModelRef): Promise<void> {
      if (ref.dir || dirOf(ref.id)) { await load(ref); return; }
      await pull(ref);
    },

    extract(ref: ModelRef, texts: string[], schema: EncoderSchema, o: ExtractOptions): Promise<ExtractOutput> {
      return use(ref, async (l) => {
        if (!l.enc) throw new Error(`${ref.id} is not an encoder`);
        const results = (await l.enc.extract(texts, schema, { threshold: o.threshold, include_confidence: o.include_confidence, include_spans: o.include_spans })) as unknown as Record<string, unknown>[];
        const ids = await l.enc.tokenizer.encodeTexts(texts);
        return { results, input_tokens: ids.reduce((n, a) => n + a.length, 0) };
      });
    },

    async *generate(ref: ModelRef, p: GenerateParams): AsyncIterable<GenerateEvent> {
      inflight++;
      try {
        const l = await load(ref);
        if (!l.dec) throw new Error(`${ref.id} is not a decoder`);
        const { messages, prompt, signal, ...rest } = p;
        const stream = l.dec.generate({ ...(rest as object), messages: messages as never, prompt, signal, adapter: l.adapter });
        try {
          for await (const ev of stream) {
            if (ev.type === 'delta') {
              if (ev.prompt_usage) yield { type: 'start', usage: disjointUsage(ev.prompt_usage) };
              yield ev.logprobs
                ? { type: 'delta', text: ev.text, logprobs: ev.logprobs }
                : { type: 'delta', text: ev.text };
            }
            else yield { type: 'done', finish_reason: ev.finish_reason, stop_sequence: ev.stop_sequence, text: ev.text, usage: disjointUsage(ev.usage) };
          }
        } catch (e) {
          // cancelled after it started: report what was processed so the call can be billed for it
          const ab = e as { name?: string; usage?: Parameters<typeof disjointUsage>[0]; text?: string };
          if (ab?.name === 'AbortError' && ab.usage) {
            yield { type: 'done', finish_reason: 'cancelled', stop_sequence: null, text: ab.text ?? '', usage: disjointUsage(ab.usage) };
            return;
          }
          throw e;
        }
      } finally { inflight--; }
    },

    countTokens(ref: ModelRef, p: GenerateParams): Promise<number> {
      return use(ref, async (l) => {
        if (l.enc) return (await l.enc.tokenizer.encodeTexts([p.prompt ?? ''])).reduce((n, a) => n + a.length, 0);
        const { messages, prompt, tools } = p;
        return (await l.dec!.preparePrompt({ messages: messages as never, prompt, tools: tools as never })).ids.length;
      });
    },

    async templateSupportsTools(ref: ModelRef): Promise<boolean> {
      const l = await load(ref);
      return !!l.dec && chatTemplateUsesTools(l.dec.tokenizer.chatTemplate);
    },

    embed(ref: ModelRef, texts: string[], o?: { dimensions?: number }): Promise<EmbedOutput> {
      return use(ref, async (l) => {
        const m = (l.enc ?? l.dec)!;
        const vecs = await m.embed(texts);
        const dims = o?.dimensions && o.dimensions < vecs[0].length ? o.dimensions : vecs[0]?.length ?? 0;
        let input_tokens = 0;
        if (l.enc) input_tokens = (await l.enc.tokenizer.encodeTexts(texts)).reduce((n, a) => n + a.length, 0);
        else for (const t of texts) input_tokens += (await l.dec!.preparePrompt({ prompt: t })).ids.length;
        return { embeddings: vecs.map((v) => Array.from(v.subarray(0, dims))), input_tokens, dimensions: dims };
      });
    },

    stats() {
      const memory = [...loaded].map(([id, l]) => ({
        id, weight_bytes: l.dec?.info.weightBytes ?? 0, kv_bytes: l.dec?.info.kvCacheBytes ?? 0,
      }));
      const pulling = [...pulls].filter(([, s]) => s.state === 'pulling').map(([k]) => k);
      return { loaded: [...loaded.keys()], memory, warming: [...loading.keys(), ...pulling], queue_depth: inflight };
    },

    async close() {
      for (const l of loaded.values()) {
        const m = (l.enc ?? l.dec) as unknown as { dispose?: () => void; close?: () => void };
        m?.dispose?.() ?? m?.close?.();
      }
      loaded.clear();
    },
  };
}
