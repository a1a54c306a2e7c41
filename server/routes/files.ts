// Streams a file as the response body (chunked, with back-pressure: a slow reader never makes the
// server hold more than one chunk), for dataset downloads and weight archives.
import { createReadStream, statSync } from 'node:fs';
import type { Ctx } from '../router.ts';

export async function sendFile(stream: Ctx['stream'], path: string, headers: Record<string, string>): Promise<void> {
  const size = statSync(path).size;
  const s = stream(200, { ...headers, 'X-File-Size': String(size) });
  const rs = createReadStream(path, { highWaterMark: 1 << 20 });
  s.onAbort(() => rs.destroy());
  try {
    for await (const chunk of rs) {
      if (s.closed) break;
      await s.write(chunk as Buffer);
    }
  } finally {
    rs.destroy();
    s.end();
  }
}
