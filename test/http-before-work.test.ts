import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { sleep, useHarness, waitFor, type Child, type Harness } from './helpers/harness.ts';

/**
 * Invariant 12 for the HTTP edge: an unauthenticated request costs its headers, not a parse
 * of its body; a client that trickles its headers or its body is cut off after a bound chosen
 * for an API (Node's own defaults keep such a socket for 60 s and 300 s).
 */
const COUNTER = fileURLToPath(new URL('./fixtures/parse-counter.mjs', import.meta.url));

let h: Harness;

beforeAll(async () => {
  h = await useHarness();
});

/** The counter line the API child prints on SIGUSR2 (see fixtures/parse-counter.mjs). */
async function counters(api: Child): Promise<{ large: number; cpuMicros: number }> {
  const seen = (api.output().match(/PARSE-COUNTER /g) ?? []).length;
  api.process.kill('SIGUSR2');
  const line = await waitFor(() => [...api.output().matchAll(/PARSE-COUNTER (\{.*\})/g)][seen]?.[1], 10_000, 'the counter line');
  return JSON.parse(line);
}

describe('authentication before any work', () => {
  it('100 unauthenticated 1 MiB bodies are 401 and none is parsed; malformed JSON without a key is 401', async () => {
    const api = await h.spawn('api', { env: { NODE_OPTIONS: `--import ${COUNTER}` } });
    const url = `${api.url}/v1/scopes/acme/runs`;
    const key = await h.key('acme', 'client');
    const oneMiB = JSON.stringify({ sessionId: 's', input: { content: 'x' }, metadata: { pad: 'p'.repeat(1024 * 1024 - 80) } });
    expect(oneMiB.length).toBeLessThanOrEqual(1024 * 1024);
    const before = await counters(api);
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      // No key, a key that does not exist, and a body that is not even JSON.
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (i % 3 === 1) headers.authorization = `Bearer bk_${'0'.repeat(43)}`;
      const body = i % 3 === 2 ? `{"sessionId": ${'['.repeat(1000)}` + 'z'.repeat(1024 * 1024 - 1100) : oneMiB;
      const res = await fetch(url, { method: 'POST', headers, body });
      statuses.push(res.status);
      expect((await res.json() as any).error.code).toBe('UNAUTHENTICATED');
    }
    const after = await counters(api);
    expect(new Set(statuses)).toEqual(new Set([401]));
    expect(after.large - before.large).toBe(0);
    console.log(`[http-before-work] 100 unauthenticated 1 MiB bodies: ${after.large - before.large} parsed, ` +
      `API CPU ${((after.cpuMicros - before.cpuMicros) / 1000).toFixed(0)} ms (headers, a key lookup, the 401; the bodies are read off the socket and dropped)`);

    // The counter does count: the same body with a valid key is parsed (and refused for its content).
    const authed = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: oneMiB });
    expect(authed.status).toBe(400);
    await authed.text();
    const control = await counters(api);
    expect(control.large - after.large).toBe(1);
    console.log(`[http-before-work] the same body with a valid key: parsed once, API CPU ${((control.cpuMicros - after.cpuMicros) / 1000).toFixed(0)} ms`);
  });
});

/** Writes `text` on a new connection and resolves with what came back once the server closed it. */
function exchange(port: number, write: (socket: ReturnType<typeof connect>) => void): { closed: Promise<string>; stop(): void } {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (c) => { text += c; });
  const closed = new Promise<string>((resolve) => {
    socket.on('close', () => resolve(text));
    socket.on('error', () => {});
  });
  socket.on('connect', () => write(socket));
  return { closed, stop: () => socket.destroy() };
}

/** Resolves with `p`'s value, or 'still open' after `ms`: a bound far above the configured timeouts, never a timing assertion. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, sleep(ms).then(() => 'still open' as const)]);

describe('slow clients', () => {
  it('headers that never finish are cut at HTTP_HEADERS_TIMEOUT_MS, not Node\'s 60 s', async () => {
    const api = await h.startApi({ HTTP_HEADERS_TIMEOUT_MS: '1000' });
    const slow = exchange(api.port, (s) => s.write('GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: '));
    const answer = await within(slow.closed, 20_000);
    slow.stop();
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
  });

  it('a body that trickles in is 408 REQUEST_TIMEOUT and its connection closed; a steady one is served', async () => {
    const api = await h.startApi({ BODY_MIN_BYTES_PER_SEC: '2048' });
    const key = await h.key('acme', 'client');
    const head = `POST /v1/scopes/acme/runs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n`;
    const body = JSON.stringify({ sessionId: 'slow', input: { content: 'y'.repeat(8_000) }, runtime: `${h.runtime}-none` });
    let timer: NodeJS.Timeout | undefined;
    // Ten bytes every 200 ms: 50 bytes a second.
    const trickle = exchange(api.port, (s) => {
      s.write(`${head}content-length: ${body.length}\r\n\r\n`);
      let at = 0;
      timer = setInterval(() => { if (!s.destroyed) s.write(body.slice(at, (at += 10))); }, 200);
    });
    const answer = await within(trickle.closed, 30_000);
    clearInterval(timer);
    trickle.stop();
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(answer).toContain('"code":"REQUEST_TIMEOUT"');

    // The same body in pieces at 16 KB/s, well above the minimum: accepted.
    const steady = exchange(api.port, (s) => {
      s.write(`${head}content-length: ${body.length}\r\nconnection: close\r\n\r\n`);
      let at = 0;
      timer = setInterval(() => {
        s.write(body.slice(at, (at += 1600)));
        if (at >= body.length) clearInterval(timer);
      }, 100);
    });
    const ok = await within(steady.closed, 30_000);
    clearInterval(timer);
    expect(ok).toMatch(/^HTTP\/1\.1 202/);
  });
});
