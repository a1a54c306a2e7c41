// POST /v1/embeddings response: {object: "list", data: [{object: "embedding", index, embedding}],
// model, usage: {prompt_tokens, total_tokens}}. `encoding_format: "base64"` sends each vector as
// the base64 of its little-endian float32 bytes (what the openai SDK requests by default and
// decodes). Every vector is unit-length (L2-normalized), as the reference API's are, so a dot
// product is the cosine similarity; `dimensions` shortens a vector to its first n components and
// normalizes after the cut (Matryoshka-style truncation).
import { invalidParam } from './errors.ts';

/** The first `dimensions` components (all when absent), scaled to unit length (a zero vector stays zero). */
export function truncateEmbedding(v: ArrayLike<number>, dimensions: number | undefined): Float32Array {
  const n = dimensions ?? v.length;
  const out = new Float32Array(n);
  let ss = 0;
  for (let i = 0; i < n; i++) {
    out[i] = v[i]!;
    ss += out[i]! * out[i]!;
  }
  if (ss > 0) {
    const inv = 1 / Math.sqrt(ss);
    for (let i = 0; i < n; i++) out[i]! *= inv;
  }
  return out;
}

export function encodeBase64(v: Float32Array): string {
  const le = new Float32Array(v); // copy: the platform is little-endian (x86-64 / arm64)
  return Buffer.from(le.buffer, le.byteOffset, le.byteLength).toString('base64');
}

export function checkDimensions(dimensions: number | undefined, native: number): void {
  if (dimensions !== undefined && dimensions > native) {
    throw invalidParam('dimensions', `'dimensions' must be at most ${native} for this model.`);
  }
}

export function embeddingsResponse(
  model: string,
  vectors: ArrayLike<number>[],
  opts: { encoding_format: 'float' | 'base64'; dimensions?: number; input_tokens: number; x_service?: unknown },
) {
  return {
    object: 'list' as const,
    data: vectors.map((v, index) => {
      const t = truncateEmbedding(v, opts.dimensions);
      return { object: 'embedding' as const, index, embedding: opts.encoding_format === 'base64' ? encodeBase64(t) : Array.from(t) };
    }),
    model,
    usage: { prompt_tokens: opts.input_tokens, total_tokens: opts.input_tokens },
    ...(opts.x_service ? { x_service: opts.x_service } : {}),
  };
}
