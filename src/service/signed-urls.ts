// Presigned URLs that Loom itself serves (dataset uploads, weight downloads), in the manner of
// object-store presigned URLs: the query carries `expires` (unix seconds) and `signature`, an
// HMAC-SHA256 over the method, the path and the expiry under a server secret kept in the store
// (so URLs survive a restart). Single use and size limits are enforced by the endpoint's record.
import { createHmac, randomBytes } from 'node:crypto';
import type { Store } from '../store/index.ts';
import { ForbiddenError } from './errors.ts';
import { safeEqual } from './ids.ts';

const SECRET_KEY = 'url_signing_secret';

export interface SignedUrls {
  /** `{base}{path}?expires=..&signature=..` valid for `ttlS` seconds */
  sign(method: string, path: string, ttlS: number, base: string): { url: string; expires_at: string };
  /** throws 403 when the signature is wrong or the URL expired */
  verify(method: string, path: string, query: { expires?: unknown; signature?: unknown }): void;
}

export async function createSignedUrls(store: Store): Promise<SignedUrls> {
  let secret = (await store.meta.get(SECRET_KEY)) as string | undefined;
  if (!secret) {
    const fresh = randomBytes(32).toString('base64url');
    secret = await store.tx(async (t) => {
      const cur = (await t.meta.get(SECRET_KEY)) as string | undefined;
      if (cur) return cur;
      t.meta.put(SECRET_KEY, fresh);
      return fresh;
    });
  }
  const mac = (method: string, path: string, expires: number) => createHmac('sha256', secret!).update(`${method.toUpperCase()}\n${path}\n${expires}`).digest('base64url');
  return {
    sign(method, path, ttlS, base) {
      const expires = Math.floor(Date.now() / 1000) + Math.max(1, Math.floor(ttlS));
      return { url: `${base.replace(/\/$/, '')}${path}?expires=${expires}&signature=${mac(method, path, expires)}`, expires_at: new Date(expires * 1000).toISOString() };
    },
    verify(method, path, q) {
      const expires = Number(q.expires);
      if (typeof q.signature !== 'string' || !q.signature || !Number.isInteger(expires)) throw new ForbiddenError('Missing or malformed URL signature: request a new URL');
      if (!safeEqual(q.signature, mac(method, path, expires))) throw new ForbiddenError('Invalid URL signature: request a new URL');
      if (expires * 1000 < Date.now()) throw new ForbiddenError('This URL has expired: request a new one');
    },
  };
}

/** The base URL clients reached us at (Host header; X-Forwarded-* when the proxy is trusted). */
export function requestBaseUrl(headers: Record<string, string>, fallback: string, trustProxy: boolean): string {
  const host = (trustProxy && headers['x-forwarded-host']?.split(',')[0]?.trim()) || headers['host'];
  if (!host) return fallback;
  const proto = (trustProxy && headers['x-forwarded-proto']?.split(',')[0]?.trim()) || 'http';
  return `${proto}://${host}`;
}
