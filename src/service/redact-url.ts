// A connection URL (Redis, PostgreSQL, S3) as it may appear in logs and the start-up banner.

/** the URL without its password, for logs */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    const safe = url.replace(/:[^:@/]*@/, ':***@');
    return safe.length > 80 ? `${safe.slice(0, 80)}...` : safe;
  }
}
