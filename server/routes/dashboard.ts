// The dashboard's static files (dashboard/dist, built by `npm install` / `npm run build:dashboard`):
// GET /dashboard/* and GET / (a redirect there). Files are read once, at the first request, and held
// in memory (the whole build is a few hundred KB). Hashed assets are immutable; index.html is
// revalidated on every load. Every response carries a strict Content-Security-Policy: scripts and
// styles only from this origin (no inline script, no eval), no framing.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import type { RouteDef } from '../router.ts';
import { reply } from '../router.ts';
import { DependencyUnavailableError, NotFoundError } from '../../src/service/errors.ts';

export const DASHBOARD_DIST = join(import.meta.dirname, '..', '..', 'dashboard', 'dist');

export const DASHBOARD_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain',
};

interface StaticFile {
  body: Buffer;
  headers: Record<string, string>;
}

function load(dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) {
        walk(p);
        continue;
      }
      const rel = relative(dir, p).split(sep).join('/');
      const hashed = rel.startsWith('assets/');
      files.set(rel, {
        body: readFileSync(p),
        headers: {
          'Content-Type': TYPES[extname(p)] ?? 'application/octet-stream',
          'Cache-Control': hashed ? 'public, max-age=31536000, immutable' : 'no-cache',
          'Content-Security-Policy': DASHBOARD_CSP,
          'X-Content-Type-Options': 'nosniff',
          'Referrer-Policy': 'no-referrer',
          'X-Frame-Options': 'DENY',
        },
      });
    }
  };
  walk(dir);
  return files;
}

export function dashboardRoutes(dist = DASHBOARD_DIST): RouteDef[] {
  let files: Map<string, StaticFile> | null = null;
  const serve = (path: string) => {
    if (!files) {
      if (!existsSync(join(dist, 'index.html'))) {
        throw new DependencyUnavailableError(
          'The dashboard is not built: run `npm run build:dashboard` (npm install builds it)',
        );
      }
      files = load(dist);
    }
    const f = files.get(path === '' ? 'index.html' : path);
    if (!f) throw new NotFoundError(`No dashboard file /dashboard/${path}`);
    return reply(200, f.body, f.headers);
  };
  return [
    {
      method: 'GET',
      path: '/',
      auth: 'none',
      handler: () => reply(302, '', { Location: '/dashboard/', 'Content-Type': 'text/plain' }),
    },
    {
      method: 'GET',
      path: '/dashboard',
      auth: 'none',
      handler: () => reply(301, '', { Location: '/dashboard/', 'Content-Type': 'text/plain' }),
    },
    {
      method: 'GET',
      path: '/dashboard/*',
      auth: 'none',
      name: '/dashboard/*',
      handler: ({ url }) => serve(url.slice('/dashboard/'.length)),
    },
  ];
}
