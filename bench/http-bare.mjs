// The bare peer of `npm run bench -- http`: one uWebSockets.js handler from the package Loom uses,
// answering every GET with a small JSON body (the size of Loom's /health reply). Prints its port
// on stderr as {"port": N} and serves until killed.
import uws from '@trufflesuite/uws-js-unofficial';

const body = JSON.stringify({ status: 'ok', store: 'ok', models_loaded: 0, models_warming: 0, queue_depth: 0 });
const app = uws.App();
app.get('/*', (res) => {
  res.cork(() => { res.writeStatus('200 OK').writeHeader('Content-Type', 'application/json').end(body); });
});
app.listen('127.0.0.1', 0, (sock) => {
  if (!sock) { console.error('cannot listen'); process.exit(1); }
  process.stderr.write(`${JSON.stringify({ port: uws.us_socket_local_port(sock) })}\n`);
});
