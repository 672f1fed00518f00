import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BatonClient } from '../src/lib/client/client.ts';
import { waitFor } from './helpers/harness.ts';
import { call, readSse, tokenText, type SseEvent } from './helpers/http.ts';
import { track } from './helpers/resources.ts';
import { redisServersIn, spawnStart as spawnBatonStart, startedApi } from './helpers/start.ts';

/**
 * `baton start` keeps the redis-server it spawned: killed, it is started again on the same
 * port and data, with one line when it died and one when it is back, and each connection
 * says once that it lost Redis and once that it has it again, in JSON like every other line
 * (the banner a start prints for a person aside). Ctrl-C lets the streams of runs its worker
 * finishes end with `end`; the others end with a reconnect hint and resume from their
 * Last-Event-ID on the next start. It stops only the redis-server it started.
 */

const KEY = `bk_supervision-${randomBytes(12).toString('hex')}`;
const AUTH = { authorization: `Bearer ${KEY}` };

/** `baton start` at info, with the file's key, a 3 s grace unless `env` says otherwise. */
const spawnStart = (cwd: string, env: Record<string, string> = {}) =>
  spawnBatonStart(cwd, { LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: '3000', BATON_BOOTSTRAP_KEYS: `acme:client:${KEY}`, ...env });

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'baton-supervise-'));
  track(dir, async () => {
    // A failing test must leave no redis-server behind, then no folder.
    for (const pid of redisServersIn(join(dir, '.baton', 'redis'))) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

const lockOf = (dir: string): { redis: string; redisPid: number } => JSON.parse(readFileSync(join(dir, '.baton', 'lock'), 'utf8'));

/** The lines a start prints for a person, once, as it comes up; every other line is a JSON log line. */
const BANNER = [/^API keys exist already/, /^development API key/, /^run inspector: /, /^baton is up: /];

/** The output's log lines, parsed; throws naming the first line that is neither JSON nor the banner. */
function logLines(out: string): { msg: string; [k: string]: unknown }[] {
  const lines = out.split('\n').filter((l) => l !== '');
  const logs = [];
  for (const line of lines) {
    if (BANNER.some((b) => b.test(line))) continue;
    try {
      logs.push(JSON.parse(line));
    } catch {
      throw new Error(`a line that is not JSON: ${JSON.stringify(line)}\n${out}`);
    }
  }
  return logs;
}

const count = (logs: { msg: string }[], msg: string) => logs.filter((l) => l.msg === msg).length;

async function submit(api: string, sessionId: string, content: string, delayMs: number): Promise<string> {
  const r = await call(api, 'POST', '/v1/scopes/acme/runs', { sessionId, input: { content }, metadata: { delayMs } }, AUTH);
  expect(r.status, JSON.stringify(r.body)).toBe(202);
  return r.body.id;
}

async function succeeded(api: string, runId: string): Promise<{ status: string; result?: { answer: string } }> {
  return waitFor(async () => {
    const r = await call(api, 'GET', `/v1/scopes/acme/runs/${runId}`, undefined, AUTH);
    return r.status === 200 && ['succeeded', 'failed', 'cancelled'].includes(r.body.status) ? r.body : undefined;
  }, 45_000, `run ${runId} to end`);
}

const words = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}${i}`).join(' ');

/** A whole SSE response read as text (a response cut rather than ended rejects): its events and comments. */
async function rawStream(url: string, lastEventId?: string): Promise<{ events: SseEvent[]; text: string }> {
  const res = await fetch(url, { headers: { ...AUTH, accept: 'text/event-stream', ...(lastEventId ? { 'last-event-id': lastEventId } : {}) } });
  expect(res.status).toBe(200);
  const text = await res.text();
  const events: SseEvent[] = [];
  for (const block of text.split('\n\n')) {
    const f = Object.fromEntries(block.split('\n').filter((l) => /^(id|event|data): /.test(l)).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)]));
    if (f.event) events.push({ id: f.id, event: f.event, data: JSON.parse(f.data) });
  }
  return { events, text };
}

describe('baton start supervises its redis-server', () => {
  it('SIGKILLed, it is back on the same data within seconds; runs before and after succeed; every log line is JSON', async () => {
    const dir = tempDir();
    const s = spawnStart(dir);
    const api = await startedApi(s);
    const before = lockOf(dir);

    // Running when Redis dies (20 tokens 100 ms apart), and queued behind them in their sessions.
    const running = await Promise.all([0, 1, 2].map((i) => submit(api, `before-${i}`, words(20, `r${i}-`), 100)));
    const queued = await Promise.all([0, 1, 2].map((i) => submit(api, `before-${i}`, words(5, `q${i}-`), 0)));
    await waitFor(async () => (await call(api, 'GET', `/v1/scopes/acme/runs/${running[2]}`, undefined, AUTH)).body.status === 'running', 15_000, 'a run to be running');
    const stream = readSse(`${api}/v1/scopes/acme/runs/${running[0]}/events`, { headers: AUTH });

    const killedAt = Date.now();
    process.kill(before.redisPid, 'SIGKILL');
    await waitFor(() => s.out().includes('"local redis-server back"'), 30_000, `the redis-server to be back:\n${s.out()}`);
    const backMs = Date.now() - killedAt;
    const after = lockOf(dir);
    // Another process on the same port and folder, and the lock names it for the next start.
    expect(after.redis).toBe(before.redis);
    expect(after.redisPid).not.toBe(before.redisPid);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([after.redisPid]);

    const later = await Promise.all([0, 1].map((i) => submit(api, `after-${i}`, words(5, `a${i}-`), 0)));
    const contents = [...[0, 1, 2].map((i) => words(20, `r${i}-`)), ...[0, 1, 2].map((i) => words(5, `q${i}-`)), ...[0, 1].map((i) => words(5, `a${i}-`))];
    const runs = [...running, ...queued, ...later];
    for (const [i, runId] of runs.entries()) {
      expect(await succeeded(api, runId), runId).toMatchObject({ status: 'succeeded', result: { answer: contents[i] } });
    }
    // A stream open across the outage ends with the run's `end`.
    const { events } = await stream;
    expect(events.at(-1)).toMatchObject({ event: 'end', data: { status: 'succeeded' } });
    const readyMs = Date.now() - killedAt;

    process.kill(-s.child.pid!, 'SIGINT');
    expect(await s.exited, s.out()).toBe(0);
    const logs = logLines(s.out());
    expect(count(logs, 'local redis-server died; starting it again on the same data'), s.out()).toBe(1);
    expect(count(logs, 'local redis-server back')).toBe(1);
    // Each connection: one line when it lost Redis, one when it had it again; none for each retry.
    const lost = logs.filter((l) => l.msg === 'redis connection lost').map((l) => l.connection).sort();
    const back = logs.filter((l) => l.msg === 'redis reconnected').map((l) => l.connection).sort();
    expect(lost).toEqual(expect.arrayContaining(['start-bull', 'start-cmd', 'start-sub']));
    expect(new Set(lost).size).toBe(lost.length);
    expect(back).toEqual(lost);
    expect(count(logs, 'bullmq worker error') + count(logs, 'bullmq queue error')).toBe(0);
    expect(logs.filter((l) => l.msg === 'local redis-server stopped')).toEqual([expect.objectContaining({ redisPid: after.redisPid })]);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
    console.log(`redis-server SIGKILLed under baton start: back in ${backMs} ms, ${running.length + queued.length + later.length} runs succeeded by ${readyMs} ms; ` +
      `${logs.length} log lines, ${lost.length} connections lost and back once each`);
  }, 120_000);

  it('Ctrl-C: a run the worker finishes ends its stream with `end`; a longer one is handed to a reconnect and resumes on the next start', async () => {
    const dir = tempDir();
    const s = spawnStart(dir);
    const api = await startedApi(s);
    // 10 tokens 100 ms apart end within the 3 s grace; 30 tokens 200 ms apart do not.
    const short = await submit(api, 'short', words(10, 's'), 100);
    const long = await submit(api, 'long', words(30, 'l'), 200);
    const shortStream = rawStream(`${api}/v1/scopes/acme/runs/${short}/events`);
    const longStream = rawStream(`${api}/v1/scopes/acme/runs/${long}/events`);
    await waitFor(async () => (await call(api, 'GET', `/v1/scopes/acme/runs/${long}`, undefined, AUTH)).body.status === 'running', 15_000, 'the long run to be running');

    process.kill(-s.child.pid!, 'SIGINT');
    const [a, b] = await Promise.all([shortStream, longStream]);
    expect(await s.exited, s.out()).toBe(0);
    expect(a.events.at(-1), a.text).toMatchObject({ event: 'end', data: { status: 'succeeded' } });
    expect(tokenText(a.events)).toBe(words(10, 's'));
    // Ended (not cut) with no `end` event: the reader is told to come back.
    expect(b.events.map((e) => e.event)).not.toContain('end');
    expect(b.text).toMatch(/: this API process is stopping; resume with Last-Event-ID\nretry: \d+\n\n$/);
    logLines(s.out());

    const next = spawnStart(dir);
    const api2 = await startedApi(next);
    const client = new BatonClient({ url: api2, apiKey: KEY, scope: 'acme' });
    const resumed: { id: string; type: string }[] = [];
    let last: unknown;
    for await (const e of client.stream(long, { after: b.events.at(-1)!.id })) {
      resumed.push({ id: e.id, type: e.type });
      last = e;
    }
    expect(resumed.length).toBeGreaterThan(0);
    // Each event once, after the last one the first start sent.
    expect(new Set(resumed.map((e) => e.id)).size).toBe(resumed.length);
    expect(b.events.map((e) => e.id)).not.toContain(resumed[0].id);
    expect(last).toMatchObject({ type: 'end', data: { status: 'succeeded' } });
    process.kill(-next.child.pid!, 'SIGINT');
    expect(await next.exited, next.out()).toBe(0);
    logLines(next.out());
  }, 120_000);

  it('a restart that cannot bind (another program took the port) is logged and retried; Ctrl-C then stops nothing it did not start', async () => {
    const dir = tempDir();
    const s = spawnStart(dir, { SHUTDOWN_GRACE_MS: '1000' });
    await startedApi(s);
    const { redis, redisPid } = lockOf(dir);
    const port = Number(/:(\d+)$/.exec(redis)![1]);
    // Frozen, Baton cannot start the server again before the port is someone else's.
    process.kill(s.child.pid!, 'SIGSTOP');
    process.kill(redisPid, 'SIGKILL');
    await waitFor(() => redisServersIn(join(dir, '.baton', 'redis')).length === 0, 10_000, 'the redis-server to be gone');
    // Not a Redis: it takes each connection and closes it.
    // The port is in the ephemeral range: for a moment another process's outgoing connection
    // may hold it as its local port (so Baton could not bind it either); listen once it is free.
    const other = createServer((socket) => socket.destroy());
    await waitFor(() => new Promise<boolean>((resolve, reject) => {
      const refused = (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(false) : reject(err));
      other.once('error', refused);
      other.listen(port, '127.0.0.1', () => {
        other.off('error', refused);
        resolve(true);
      });
    }), 20_000, `port ${port} to be free`);
    track(other, () => new Promise((r) => other.close(r)));
    process.kill(s.child.pid!, 'SIGCONT');
    await waitFor(() => s.out().includes('"local redis-server did not restart"'), 20_000, `a failed restart to be logged:\n${s.out()}`);

    // With no Redis, the drain cannot end well: the shutdown gives up after its deadline (exit 1).
    process.kill(-s.child.pid!, 'SIGINT');
    expect([0, 1], s.out()).toContain(await s.exited);
    const logs = logLines(s.out());
    expect(count(logs, 'local redis-server died; starting it again on the same data')).toBe(1);
    expect(count(logs, 'local redis-server back')).toBe(0);
    expect(logs.filter((l) => l.msg === 'local redis-server did not restart')[0]).toMatchObject({ port, attempt: 1, err: expect.stringMatching(/redis-server exited/) });
    expect(logs.filter((l) => /local redis-server stopped/.test(l.msg))).toEqual([]);
    // The program on the port is untouched, and no redis-server of Baton's is left.
    expect(other.listening).toBe(true);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
  }, 90_000);
});
