// The floor of `npm run bench -- http --also floor`: a uWebSockets.js handler (the package Loom uses)
// that does only the work no API server can skip, and nothing else. For each path of the answers file
// (as bench/http-bare.mjs reads it) it answers with the same status, header names and body bytes as
// Loom, but computes what Loom computes per request: for a path whose recorded answer carries
// X-RateLimit-* headers (an authenticated, rate-limited route), it reads the X-API-Key header and
// looks the key up in a Map (401 when unknown), reads the client's address and counts the request in
// a fixed one-minute window per address, and writes the four X-RateLimit-* values from that window.
// No logging, metrics, validation or error mapping. The API key is the second argument. Prints its
// port on stderr as {"port": N} and serves until killed.
import { readFileSync } from 'node:fs';
import uws from '@trufflesuite/uws-js-unofficial';

const answers = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const keys = new Map([[process.argv[3], { team_id: 'team' }]]);
const windows = new Map();
const app = uws.App();
for (const [path, a] of Object.entries(answers)) {
  const body = Buffer.from(a.body, 'base64');
  const limited = a.headers.some(([k]) => k === 'X-RateLimit-Limit');
  const others = a.headers.filter(([k]) => !k.startsWith('X-RateLimit-'));
  const limit = limited ? Number(a.headers.find(([k]) => k === 'X-RateLimit-Limit')[1]) : 0;
  const limitText = String(limit);
  app.get(path, (res, req) => {
    if (limited && keys.get(req.getHeader('x-api-key')) === undefined) {
      res.cork(() => { res.writeStatus('401 Unauthorized').end(); });
      return;
    }
    let remaining = 0;
    let resetS = 0;
    if (limited) {
      const ip = Buffer.from(res.getRemoteAddressAsText()).toString();
      const now = Date.now();
      let w = windows.get(ip);
      if (w === undefined || w.resetAt <= now) windows.set(ip, (w = { used: 0, resetAt: now + 60_000 }));
      w.used++;
      remaining = limit - w.used;
      resetS = Math.ceil((w.resetAt - now) / 1000);
    }
    res.cork(() => {
      res.writeStatus(a.status);
      if (limited) {
        res.writeHeader('X-RateLimit-Limit', limitText);
        res.writeHeader('X-RateLimit-Remaining', String(remaining));
        res.writeHeader('X-RateLimit-Reset', String(resetS));
        res.writeHeader('X-RateLimit-Scope', 'ip');
      }
      for (const [k, v] of others) res.writeHeader(k, v);
      res.end(body);
    });
  });
}
app.any('/*', (res) => { res.cork(() => { res.writeStatus('404 Not Found').end(); }); });
app.listen('127.0.0.1', 0, (sock) => {
  if (!sock) { console.error('cannot listen'); process.exit(1); }
  process.stderr.write(`${JSON.stringify({ port: uws.us_socket_local_port(sock) })}\n`);
});
