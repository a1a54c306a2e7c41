// GET /v1/models: one listing usable by both list styles.
//   OpenAI style:    {object: "list", data: [{id, object: "model", created, owned_by}]}
//   messages style:  {data: [{id, type: "model", display_name, created_at}], has_more, first_id, last_id}
// Both sets of fields are on every entry, plus the catalog's own flags. Pagination follows the
// messages style: `limit` (>= 1, omitted = the whole catalog), `after_id` (the page after that id),
// `before_id` (the page just before that id); order is the catalog's listing order.
import { CompatError } from './errors.ts';

export interface CatalogModelLike {
  id: string;
  task_type?: string;
  display_name?: string;
  name?: string;
  /** ISO 8601 */
  created_at?: string;
  owned_by?: string;
  [k: string]: unknown;
}

export interface ModelsQuery {
  limit?: number;
  before_id?: string;
  after_id?: string;
}

export const MAX_MODELS_LIMIT = 1000;
const EPOCH = '2024-01-01T00:00:00.000Z';

/** Parses the query string; wrong types are 400 and out-of-range values 422 (spec section 7). */
export function parseModelsQuery(q: URLSearchParams): ModelsQuery {
  const out: ModelsQuery = {};
  const limit = q.get('limit');
  if (limit !== null) {
    if (!/^-?[0-9]+$/.test(limit)) throw new CompatError(400, `Invalid type for 'limit': expected an integer, got '${limit}'.`, { param: 'limit', code: 'invalid_type' });
    const n = Number(limit);
    if (n < 1) throw new CompatError(422, "Invalid value for 'limit': must be >= 1.", { param: 'limit', code: 'invalid_value' });
    out.limit = Math.min(n, MAX_MODELS_LIMIT);
  }
  const before = q.get('before_id');
  const after = q.get('after_id');
  if (before !== null && after !== null) {
    throw new CompatError(422, "Use at most one of 'before_id' and 'after_id'.", { param: 'before_id', code: 'invalid_value' });
  }
  if (before !== null) out.before_id = before;
  if (after !== null) out.after_id = after;
  return out;
}

export function modelEntry(m: CatalogModelLike) {
  const created_at = m.created_at ?? EPOCH;
  const { id, display_name, name, owned_by, created_at: _c, ...rest } = m;
  return {
    ...rest,
    id,
    object: 'model' as const,
    type: 'model' as const,
    display_name: display_name ?? name ?? id,
    created_at,
    created: Math.floor(Date.parse(created_at) / 1000),
    owned_by: owned_by ?? 'loom',
  };
}

export function listModels(models: CatalogModelLike[], q: ModelsQuery) {
  const all = models.map(modelEntry);
  let start = 0;
  let end = all.length;
  const indexOf = (id: string, param: string) => {
    const i = all.findIndex((m) => m.id === id);
    if (i < 0) throw new CompatError(404, `The model '${id}' named by '${param}' does not exist.`, { param, code: 'model_not_found' });
    return i;
  };
  let hasMore = false;
  if (q.after_id !== undefined) {
    start = indexOf(q.after_id, 'after_id') + 1;
    if (q.limit !== undefined && end - start > q.limit) {
      end = start + q.limit;
      hasMore = true;
    }
  } else if (q.before_id !== undefined) {
    end = indexOf(q.before_id, 'before_id');
    start = 0;
    if (q.limit !== undefined && end - start > q.limit) {
      start = end - q.limit;
      hasMore = true;
    }
  } else if (q.limit !== undefined && all.length > q.limit) {
    end = q.limit;
    hasMore = true;
  }
  const data = all.slice(start, end);
  return {
    object: 'list' as const,
    data,
    has_more: hasMore,
    first_id: data[0]?.id ?? null,
    last_id: data[data.length - 1]?.id ?? null,
  };
}

const fullListings = new WeakMap<CatalogModelLike[], Buffer>();

/**
 * The whole listing (no limit, before_id or after_id) as its JSON body bytes, serialized and
 * encoded once per catalog snapshot: `models` must be the same array until the catalog changes
 * (catalog.list() keeps it). Building and serializing every entry on each call cost several times
 * the rest of an authenticated GET /v1/models; a Buffer also spares the server a UTF-8 encoding of
 * the 5 KB string per request.
 */
export function fullListingJson(models: CatalogModelLike[]): Buffer {
  let body = fullListings.get(models);
  if (body === undefined) {
    body = Buffer.from(JSON.stringify(listModels(models, {})));
    fullListings.set(models, body);
  }
  return body;
}
