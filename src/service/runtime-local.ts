// The production ModelRuntime: models under LOOM_MODELS_DIR (Hugging Face layout, `<name>/` or
// `<org>/<name>/`), loaded lazily on first use, at most `maxLoaded` at once (least recently used is
// dropped). A model on disk loads inside the first request (concurrent requests share the load);
// a catalog model not on disk (nor in the Hugging Face cache) is pulled through src/runtime/hub.ts
// and reports `warming` (425 + Retry-After, with progress) while it pulls and loads; a failed pull
// answers 503 for a minute. The native modules are imported lazily, so a build without them still
// serves everything else and answers with the error here.
//
// Many adapters, one base (as LoRAX and vLLM serve them): loaded models are keyed by their base's folder, so
// every decoder LoRA job over one base runs on ONE loaded base, in the same batches (the decoder applies LoRA per
// sequence). A job's adapter is loaded into its base on first use, under the job id, and unloaded on its own:
// least recently used first once the adapters' bytes pass `adapterMemory` (LOOM_ADAPTER_MEMORY, default 1GiB), never
// while a generation holds it (a reference count per adapter; a base with generations running is not evicted
// either), and when its job is deleted (`unload`). `stats().memory` reports each base's weight and KV bytes and
// the adapters loaded into it.
//
// GGUF files are models too: a `*.gguf` file in the models folder is listed as its file name without
// `.gguf`, a folder (or a cached Hugging Face snapshot) without config.json that holds exactly one `*.gguf`
// file as the folder's id; the decoder config comes from the file's metadata (src/formats/gguf-hf.ts, imported
// lazily as it needs the native addon) and `dir` is the file itself, which loadDecoder opens.
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { EncoderModel } from '../models/encoder/index.ts';
import type { DecoderModel } from '../runtime/generate.ts';
import { cachedSnapshot, pullModel } from '../runtime/hub.ts';
import { type DecoderConfig, parseDecoderConfig } from '../formats/hf-config.ts';
import { parseMemorySize } from '../runtime/memory-size.ts';
import type { EmbedOutput, EncoderSchema, ExtractOptions, ExtractOutput, GenerateEvent, GenerateParams, LocalModel, ModelKind, ModelRef, ModelRuntime, ModelStatus } from './runtime.ts';

/** stats() of an idle runtime: no model loaded or warming (frozen: shared by every call) */
const NONE = Object.freeze([]) as unknown as string[];

/** An adapter loaded into a base under its job id; `refs` generations use it now (never evicted while > 0). */
interface LoadedAdapter { id: string; bytes: number; refs: number; lastUsed: number; drop: boolean }

/**
 * A loaded model (a base, or a job's full weights) and the adapters loaded into it; `users` calls run on it now.
 * `drop`: unload once the last user is done (its job was deleted while it ran).
 */
interface Loaded {
  id: string; kind: ModelKind; enc?: EncoderModel; dec?: DecoderModel; lastUsed: number; users: number;
  adapters: Map<string, LoadedAdapter>; drop?: boolean;
}

/** One call's hold on a loaded model (and on the adapter it runs with): `release` once the call is done. */
interface Lease { l: Loaded; adapter?: string; release(): void }

/** The adapter budget when neither the option nor LOOM_ADAPTER_MEMORY sets one. */
export const DEFAULT_ADAPTER_MEMORY = '1GiB';

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

let gguf: { reader: typeof import('../formats/gguf.ts'); hf: typeof import('../formats/gguf-hf.ts') } | null = null;
/** Settles when the GGUF reader is imported (or failed to: no native addon, so no GGUF models). */
export const ggufReaderReady: Promise<void> = Promise.all([import('../formats/gguf.ts'), import('../formats/gguf-hf.ts')])
  .then(([reader, hf]) => { gguf = { reader, hf }; }, () => {});
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
    const f = new gguf.reader.GgufFile(file);
    const dec = parseDecoderConfig(gguf.hf.ggufToHfConfig(f.metadataObject()), file);
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
  /** bytes of LoRA adapters kept loaded over all bases ("512MiB", "2GiB", bytes); default LOOM_ADAPTER_MEMORY, else
   *  1GiB. Adapters in use stay loaded past it. */
  adapterMemory?: string | number;
}

export function createLocalRuntime(opts: LocalRuntimeOptions): ModelRuntime {
  const maxLoaded = Math.max(1, opts.maxLoaded ?? 4);
  const retryAfter = opts.retryAfterS ?? 5;
  const adapterBudget = parseMemorySize(
    opts.adapterMemory ?? (process.env.LOOM_ADAPTER_MEMORY || DEFAULT_ADAPTER_MEMORY));
  /** loaded models by base key (the canonical folder of the weights) */
  const loaded = new Map<string, Loaded>();
  /** loads under way by base key, with the id they load */
  const loading = new Map<string, { id: string; p: Promise<Loaded> }>();
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

  const isAdapter = (ref: ModelRef) => ref.weights === 'adapter' && !!ref.base_model;
  const canonical = (dir: string) => { try { return realpathSync(dir); } catch { return dir; } };
  /** The model a ref runs on: its base for an adapter, else itself; `key` names it in `loaded`. */
  function baseOf(ref: ModelRef): { key: string; id: string; dir: string | undefined } {
    const id = isAdapter(ref) ? ref.base_model! : ref.id;
    const dir = isAdapter(ref) ? ref.base_dir ?? dirOf(id) : ref.dir ?? dirOf(id);
    return { key: dir ? canonical(dir) : `id:${id}`, id, dir };
  }

  function dispose(key: string, l: Loaded): void {
    loaded.delete(key);
    const m = (l.enc ?? l.dec) as unknown as { dispose?: () => void; close?: () => void };
    m?.dispose?.() ?? m?.close?.();
  }

  /** Least recently used models go past `maxLoaded`, never one a call is running on. */
  function evictModels(): void {
    while (loaded.size > maxLoaded) {
      let oldest: [string, Loaded] | null = null;
      for (const e of loaded) if (e[1].users === 0 && (!oldest || e[1].lastUsed < oldest[1].lastUsed)) oldest = e;
      if (!oldest) return;
      dispose(oldest[0], oldest[1]);
    }
  }

  function unloadAdapter(l: Loaded, a: LoadedAdapter): void {
    l.adapters.delete(a.id);
    l.dec?.unloadAdapter(a.id);
  }

  /** Least recently used adapters (over all bases) go while their bytes pass the budget, never one in use. */
  function evictAdapters(): void {
    for (;;) {
      let total = 0;
      let oldest: [Loaded, LoadedAdapter] | null = null;
      for (const l of loaded.values()) {
        for (const a of l.adapters.values()) {
          total += a.bytes;
          if (a.refs === 0 && (!oldest || a.lastUsed < oldest[1].lastUsed)) oldest = [l, a];
        }
      }
      if (total <= adapterBudget || !oldest) return;
      unloadAdapter(oldest[0], oldest[1]);
    }
  }

  async function loadModel(ref: ModelRef): Promise<Loaded> {
    await ggufReaderReady;
    const b = baseOf(ref);
    const hit = loaded.get(b.key);
    if (hit) { hit.lastUsed = Date.now(); return hit; }
    let p = loading.get(b.key)?.p;
    if (!p) {
      p = (async (): Promise<Loaded> => {
        if (!b.dir) {
          throw new Error(isAdapter(ref) ? `base model ${b.id} of ${ref.id} is not on disk`
            : `model ${ref.id} is not on disk`);
        }
        const base = { id: b.id, lastUsed: Date.now(), users: 0, adapters: new Map<string, LoadedAdapter>() };
        let l: Loaded;
        if (ref.kind === 'encoder') {
          const { loadEncoder } = await import('../models/encoder/index.ts');
          l = { ...base, kind: 'encoder', enc: await loadEncoder(b.dir, { dtype: opts.encoderDtype }) };
        } else {
          const { loadDecoder } = await import('../runtime/generate.ts');
          l = { ...base, kind: 'decoder', dec: await loadDecoder(b.dir, { id: b.id }) };
        }
        loaded.set(b.key, l);
        evictModels();
        return l;
      })().finally(() => loading.delete(b.key));
      loading.set(b.key, { id: b.id, p });
    }
    return p;
  }

  /**
   * The model `ref` runs on, held for one call: with `withAdapter`, an adapter ref's adapter is loaded into its
   * base (first use) and held too. Release the lease when the call is done.
   */
  async function acquire(ref: ModelRef, withAdapter: boolean): Promise<Lease> {
    const l = await loadModel(ref);
    l.users++;
    l.lastUsed = Date.now();
    let a: LoadedAdapter | undefined;
    if (withAdapter && isAdapter(ref)) {
      try {
        if (!l.dec) throw new Error(`${ref.id}: an adapter needs a decoder base`);
        a = l.adapters.get(ref.id);
        if (!a) {
          const info = l.dec.loadAdapter(ref.id, ref.dir ?? '');
          a = { id: ref.id, bytes: info.bytes, refs: 0, lastUsed: 0, drop: false };
          l.adapters.set(ref.id, a);
        }
        a.refs++;
        a.lastUsed = Date.now();
        evictAdapters();
      } catch (e) {
        l.users--;
        throw e;
      }
    }
    let released = false;
    return {
      l, adapter: a?.id,
      release() {
        if (released) return;
        released = true;
        l.users--;
        if (a) {
          a.refs--;
          if (a.drop && a.refs === 0 && l.adapters.get(a.id) === a) unloadAdapter(l, a);
        }
        if (l.drop && l.users === 0) {
          for (const [k, v] of loaded) if (v === l) dispose(k, l);
        }
        evictAdapters();
        evictModels();
      },
    };
  }

  async function pull(ref: ModelRef): Promise<void> {
    const k = keyOf(ref);
    const cur = pulls.get(k);
    if (cur?.state === 'pulling') return;
    pulls.set(k, { state: 'pulling', at: Date.now() });
    try {
      const snap = await pullModel(ref.id, { onProgress: (p) => { const s = pulls.get(k); if (s && p.total) s.progress = p.bytes / p.total; } });
      snapshots.set(ref.id, snap);
      await loadModel(ref);
      pulls.delete(k);
    } catch (e) {
      pulls.set(k, { state: 'failed', error: (e as Error).message, at: Date.now() });
      throw e;
    }
  }

  /** Runs `fn` on the model `ref` runs on (its base for an adapter: tokens and embeddings are the base's). */
  async function use<T>(ref: ModelRef, fn: (l: Loaded) => Promise<T>): Promise<T> {
    inflight++;
    let lease: Lease | undefined;
    try {
      lease = await acquire(ref, false);
      return await fn(lease.l);
    } finally {
      lease?.release();
      inflight--;
    }
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
      if (ref.dir && !existsSync(ref.dir)) return { state: 'not_found' };
      // an adapter whose base is loaded loads inside the request
      if (loaded.has(baseOf(ref).key)) return { state: 'ready' };
      const p = pulls.get(k);
      if (p?.state === 'pulling') return { state: 'warming', retry_after_s: retryAfter, progress: p.progress };
      if (p?.state === 'failed' && Date.now() - p.at < 60_000) return { state: 'unavailable', reason: `pull of ${ref.id} failed: ${p.error}` };
      if (ref.dir) return { state: 'ready' };
      // on disk: loads inside the request (concurrent callers share the load)
      if (dirOf(ref.id)) return { state: 'ready' };
      return { state: 'pullable' };
    },

    async warm(ref: ModelRef): Promise<void> {
      if (ref.dir || dirOf(ref.id)) { (await acquire(ref, true)).release(); return; }
      await pull(ref);
    },

    unload(ref: ModelRef): void {
      for (const [key, l] of loaded) {
        const a = l.adapters.get(ref.id);
        if (a) {
          if (a.refs === 0) unloadAdapter(l, a);
          else a.drop = true;
        }
        if (!isAdapter(ref) && ref.dir && key === canonical(ref.dir)) {
          if (l.users === 0) dispose(key, l);
          else l.drop = true;
        }
      }
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
      let lease: Lease | undefined;
      try {
        lease = await acquire(ref, true);
        const l = lease.l;
        if (!l.dec) throw new Error(`${ref.id} is not a decoder`);
        const { messages, prompt, signal, ...rest } = p;
        const stream = l.dec.generate({
          ...(rest as object), messages: messages as never, prompt, signal, adapter: lease.adapter,
        });
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
      } finally {
        lease?.release();
        inflight--;
      }
    },

    countTokens(ref: ModelRef, p: GenerateParams): Promise<number> {
      return use(ref, async (l) => {
        if (l.enc) return (await l.enc.tokenizer.encodeTexts([p.prompt ?? ''])).reduce((n, a) => n + a.length, 0);
        const { messages, prompt, tools } = p;
        return (await l.dec!.preparePrompt({ messages: messages as never, prompt, tools: tools as never })).ids.length;
      });
    },

    templateSupportsTools(ref: ModelRef): Promise<boolean> {
      return use(ref, async (l) => !!l.dec && chatTemplateUsesTools(l.dec.tokenizer.chatTemplate));
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
      // nothing loaded, loading or pulling (a probe of an idle server): no arrays to build
      if (loaded.size === 0 && loading.size === 0 && pulls.size === 0) {
        return { loaded: NONE, memory: [], warming: NONE, queue_depth: inflight };
      }
      const memory = [...loaded.values()].map((l) => {
        const adapters = [...l.adapters.values()].map((a) => ({ id: a.id, bytes: a.bytes, in_use: a.refs }));
        return {
          id: l.id, weight_bytes: l.dec?.info.weightBytes ?? 0, kv_bytes: l.dec?.info.kvCacheBytes ?? 0,
          adapter_bytes: adapters.reduce((n, a) => n + a.bytes, 0), adapters,
          ...(l.dec ? { steps: l.dec.scheduler.stats().steps } : {}),
        };
      });
      const pulling = [...pulls].filter(([, s]) => s.state === 'pulling').map(([k]) => k);
      const warming = [...[...loading.values()].map((x) => x.id), ...pulling];
      return { loaded: [...loaded.values()].map((l) => l.id), memory, warming, queue_depth: inflight };
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
