// The bare peer of `npm run bench -- http`: one uWebSockets.js handler from the package Loom uses.
// It answers each path in the JSON file given as its argument ({path: {status, headers: [[name,
// value]], body (base64)}}, recorded from Loom's own answers by bench/http.ts) with the same status
// line, the same header lines and the same body bytes, so uWS and the kernel write as much for it as
// for the Loom route it is compared with; other paths get a 404. Prints its port on stderr as
// {"port": N} and serves until killed.
import { readFileSync } from 'node:fs';
import uws from '@trufflesuite/uws-js-unofficial';

const answers = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const app = uws.App();
for (const [path, a] of Object.entries(answers)) {
  const body = Buffer.from(a.body, 'base64');
  app.get(path, (res) => {
    res.cork(() => {
      res.writeStatus(a.status);
      for (const [k, v] of a.headers) res.writeHeader(k, v);
      res.end(body);
    });
  });
}
app.any('/*', (res) => { res.cork(() => { res.writeStatus('404 Not Found').end(); }); });
app.listen('127.0.0.1', 0, (sock) => {
  if (!sock) { console.error('cannot listen'); process.exit(1); }
  process.stderr.write(`${JSON.stringify({ port: uws.us_socket_local_port(sock) })}\n`);
});
