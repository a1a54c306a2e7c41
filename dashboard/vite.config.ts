// Builds the dashboard into dashboard/dist (served under /dashboard/ by server/routes/dashboard.ts).
// No inline script anywhere (the server's CSP forbids it): no module-preload polyfill, CSS in files.
import { defineConfig } from 'vite';

export default defineConfig({
  root: import.meta.dirname,
  base: '/dashboard/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 400,
  },
});
