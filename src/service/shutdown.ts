// Graceful stop for Loom's long-running processes (the server, `loom worker`, an inference node):
// the first SIGINT or SIGTERM logs why and runs `close` (drain, release, deregister), then exits 0,
// or 1 when `close` fails; a second signal while closing exits 1 at once.

interface ShutdownLog {
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export function onShutdownSignal(log: ShutdownLog, message: string, close: () => Promise<unknown>): void {
  let stopping = false;
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (stopping) process.exit(1);
      stopping = true;
      log.info({ signal: sig }, message);
      close().then(() => process.exit(0), (err) => {
        log.error({ err: String(err) }, 'shutdown failed');
        process.exit(1);
      });
    });
  }
}
