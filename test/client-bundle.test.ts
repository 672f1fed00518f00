import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

describe('baton/client in a browser bundle', () => {
  it('bundles for the browser from its own folder alone: no server package, no Node built-in', async () => {
    // platform browser fails the build on any node: import; the inputs list says what else came along.
    const out = await build({
      entryPoints: [`${ROOT}src/client.ts`], bundle: true, platform: 'browser', format: 'esm',
      write: false, metafile: true, logLevel: 'silent',
    });
    const inputs = Object.keys(out.metafile.inputs).sort();
    // The client and the contract (the public shapes, which import nothing), and nothing else.
    expect(inputs.filter((f) => !f.startsWith('src/lib/contract/'))).toEqual([
      'src/client.ts', 'src/lib/client/client.ts', 'src/lib/client/errors.ts', 'src/lib/client/event-stream.ts',
      'src/lib/client/requests.ts', 'src/lib/client/sse-parser.ts', 'src/lib/client/transport.ts',
    ]);
    expect(inputs.filter((f) => f.startsWith('src/lib/contract/')).length).toBeGreaterThan(0);
    const code = out.outputFiles[0].text;
    for (const name of ['ioredis', 'bullmq', 'express', 'openai', 'pino', 'prom-client', 'zod']) expect(code).not.toContain(name);
    expect(code).toMatch(/export \{[^}]*\bBatonClient\b/);
  });
});
