// Identifiers, secrets and password hashing (node:crypto only).
import { hash, randomBytes, randomUUID, scrypt, timingSafeEqual } from 'node:crypto';

export const KEY_PREFIX = 'loom_sk_';

export const newId = (): string => randomUUID();
export const nowIso = (): string => new Date().toISOString();
/** hex sha256 (crypto.hash: one call, no Hash object; it runs on every key-authenticated request) */
export const sha256 = (s: string): string => hash('sha256', s, 'hex');
/** url-safe random token of `bytes` random bytes */
export const randomToken = (bytes = 32): string => randomBytes(bytes).toString('base64url');
export const newApiKeySecret = (): string => KEY_PREFIX + randomToken(32);

const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 };

function scryptAsync(password: string, salt: Buffer): Promise<Buffer> {
  return new Promise((res, rej) =>
    scrypt(password, salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p }, (err, key) => (err ? rej(err) : res(key))),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password, salt);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const key = await scryptAsync(password, Buffer.from(parts[4], 'base64'));
  const want = Buffer.from(parts[5], 'base64');
  return key.length === want.length && timingSafeEqual(key, want);
}

/** constant-time string comparison */
export function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
