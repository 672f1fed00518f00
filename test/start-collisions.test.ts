import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLI_TEST_TIMEOUT_MS } from './helpers/cli.ts';
import { BIN, sleep } from './helpers/harness.ts';
import { call } from './helpers/http.ts';
import { track } from './helpers/resources.ts';
import { redisServersIn, spawnStart, startedApi } from './helpers/start.ts';

/**
 * `baton start` without REDIS_URL spawns a redis-server on `.baton/redis` in the folder it
 * runs in. Starts must not collide: with METRICS_PORT taken it still comes up (only the API
 * port serves metrics); a second start in the same folder leaves the first one's Redis alone
 * and says where that one runs; a start that fails, or is killed, leaves no redis-server
 * behind (the next start stops an orphan); and Ctrl-C to the terminal's process group stops
 * it cleanly, its redis-server last.
 */

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'baton-collide-'));
  // Last: after the redis-servers below are stopped.
  track(dir, async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Kills whatever redis-server is still working in `dir` when the test ends (a failing test must not leak one). */
function reapRedisIn(dir: string): void {
  track(dir, async () => {
    for (const pid of redisServersIn(join(dir, '.baton', 'redis'))) {
      try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    }
  });
}

function lockOf(dir: string): { pid: number; redis: string; redisPid: number; api: string } {
  return JSON.parse(readFileSync(join(dir, '.baton', 'lock'), 'utf8'));
}

const NOISE = /ECONNREFUSED|Error:|\n\s+at /;

/** A port on 127.0.0.1 that another program holds for the rest of the test. */
async function takenPort(): Promise<number> {
  const taken: Server = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  track(taken, () => new Promise((r) => taken.close(r)));
  return (taken.address() as { port: number }).port;
}

describe('baton start', () => {
  it('comes up with METRICS_PORT taken: metrics are served on the API port', async () => {
    const port = await takenPort();
    const dir = tempDir();
    reapRedisIn(dir);
    const s = spawnStart(dir, { METRICS_PORT: String(port) });
    const api = await startedApi(s);
    const metrics = await fetch(`${api}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('baton_');
    s.child.kill('SIGTERM');
    expect(await s.exited, s.out()).toBe(0);
  }, CLI_TEST_TIMEOUT_MS);

  it('a second start in the same folder exits 1 naming the first, leaves it serving and its Redis untouched', async () => {
    const dir = tempDir();
    reapRedisIn(dir);
    const first = spawnStart(dir);
    const api = await startedApi(first);
    const lock = lockOf(dir);
    expect(lock).toMatchObject({ pid: first.child.pid, api, redis: expect.stringMatching(/^redis:\/\/127\.0\.0\.1:\d+$/) });
    const urlFile = join(dir, '.baton', 'redis.url');
    const urlBefore = { text: readFileSync(urlFile, 'utf8'), mtimeMs: statSync(urlFile).mtimeMs };
    const lockBefore = readFileSync(join(dir, '.baton', 'lock'), 'utf8');

    const second = spawnStart(dir);
    expect(await second.exited).toBe(1);
    expect(second.out().trim()).toBe(
      `a Baton already runs in ${dir} (pid ${first.child.pid}): API ${api}, Redis ${lock.redis}. ` +
      'Stop it first (Ctrl-C where it runs), or start another one in a folder of its own or with REDIS_URL.',
    );
    // Nothing of the first one's changed, and one redis-server works on .baton/redis: the first's.
    expect({ text: readFileSync(urlFile, 'utf8'), mtimeMs: statSync(urlFile).mtimeMs }).toEqual(urlBefore);
    expect(readFileSync(join(dir, '.baton', 'lock'), 'utf8')).toBe(lockBefore);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([lock.redisPid]);
    expect((await call(api, 'GET', '/readyz')).status).toBe(200);
    // `baton keys` next to them still finds the first one's Redis: the key it lists is the dev key the first start made.
    const env: Record<string, string | undefined> = { ...process.env, LOG_LEVEL: 'warn' };
    delete env.REDIS_URL;
    const keys = spawnSync(process.execPath, [BIN, 'keys', 'list', '--scope', 'dev', '--json'], { cwd: dir, env, encoding: 'utf8' });
    expect(keys.status, keys.stderr).toBe(0);
    expect(JSON.parse(keys.stdout)).toEqual([expect.objectContaining({ scope: 'dev', role: 'admin' })]);

    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    expect(existsSync(join(dir, '.baton', 'lock'))).toBe(false);
    expect(existsSync(urlFile)).toBe(false);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
  }, CLI_TEST_TIMEOUT_MS);

  it('SIGINT to its process group (a terminal\'s Ctrl-C, echoed by npm) stops it at once, exit 0, without noise, its redis-server last', async () => {
    const dir = tempDir();
    reapRedisIn(dir);
    const s = spawnStart(dir, { LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: '10000' });
    const api = await startedApi(s);
    const { redisPid } = lockOf(dir);
    // The redis-server is in a group of its own: the terminal's signal does not reach it.
    expect(readFileSync(`/proc/${redisPid}/stat`, 'utf8').split(') ')[1].split(' ')[2]).toBe(String(redisPid));
    expect((await call(api, 'GET', '/readyz')).status).toBe(200);

    const began = Date.now();
    process.kill(-s.child.pid!, 'SIGINT');
    // `npm start` forwards the Ctrl-C its child got from the terminal already: the same request, not a second one.
    await sleep(20);
    s.child.kill('SIGINT');
    const code = await s.exited;
    console.log(`[start] stopped ${Date.now() - began} ms after Ctrl-C (SHUTDOWN_GRACE_MS 10000)`);
    expect(code, s.out()).toBe(0);
    const after = s.out().slice(s.out().indexOf('"shutting down"'));
    expect(after, s.out()).not.toMatch(NOISE);
    // At once: with no run in flight it waited out nothing (no grace, no forced close, no deadline).
    expect(after, after).toMatch(/"inFlight":0[^\n]*"worker stopping: no new claims"/);
    expect(after, after).not.toMatch(/forcing it|did not finish in time|second signal/);
    expect(after.indexOf('local redis-server stopped'), after).toBeGreaterThan(after.indexOf('worker stopped'));
    expect(after.indexOf('worker stopped'), after).toBeGreaterThan(0);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
    expect(existsSync(join(dir, '.baton', 'lock'))).toBe(false);
  }, CLI_TEST_TIMEOUT_MS);

  it('SIGHUP (the terminal closed) stops it as Ctrl-C does, its redis-server too', async () => {
    const dir = tempDir();
    reapRedisIn(dir);
    const s = spawnStart(dir);
    await startedApi(s);
    process.kill(-s.child.pid!, 'SIGHUP');
    expect(await s.exited, s.out()).toBe(0);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
  }, CLI_TEST_TIMEOUT_MS);

  it('a start that fails after spawning its redis-server stops it and says why in one line', async () => {
    const port = await takenPort();
    const dir = tempDir();
    reapRedisIn(dir);
    const s = spawnStart(dir, { PORT: String(port) });
    expect(await s.exited).toBe(1);
    expect(s.out().trim()).toBe(`baton start: port ${port} on 127.0.0.1 is in use by another program; choose another with --port (PORT)`);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
    expect(existsSync(join(dir, '.baton', 'lock'))).toBe(false);
    expect(existsSync(join(dir, '.baton', 'redis.url'))).toBe(false);

    // An agent module that does not load fails the same way, after the redis-server started.
    const bad = spawnStart(dir, {}, ['--agents', './missing.mjs']);
    expect(await bad.exited).toBe(1);
    expect(bad.out().trim().split('\n')).toEqual([expect.stringMatching(/^baton start: Cannot find module .*missing\.mjs/)]);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([]);
  }, CLI_TEST_TIMEOUT_MS);

  it('a stale lock is taken over: the dead start\'s redis-server is stopped, a pid now running another program is not a Baton', async () => {
    const dir = tempDir();
    reapRedisIn(dir);
    const killed = spawnStart(dir);
    await startedApi(killed);
    const old = lockOf(dir);
    // SIGKILL: no shutdown runs, the redis-server lives on alone.
    killed.child.kill('SIGKILL');
    await killed.exited;
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toEqual([old.redisPid]);

    const next = spawnStart(dir);
    const api = await startedApi(next);
    expect(lockOf(dir)).toMatchObject({ pid: next.child.pid, api });
    const running = redisServersIn(join(dir, '.baton', 'redis'));
    expect(running).toHaveLength(1);
    expect(running).not.toContain(old.redisPid);
    next.child.kill('SIGTERM');
    expect(await next.exited).toBe(0);

    // A lock naming a live pid that is no Baton (a pid reused after a reboot): stale too.
    const other = spawn('sleep', ['30'], { cwd: dir, stdio: 'ignore' });
    track(other, async () => { other.kill('SIGKILL'); });
    writeFileSync(join(dir, '.baton', 'lock'), JSON.stringify({ pid: other.pid, startedAt: new Date().toISOString() }));
    const third = spawnStart(dir);
    await startedApi(third);
    expect(lockOf(dir).pid).toBe(third.child.pid);
    third.child.kill('SIGTERM');
    expect(await third.exited).toBe(0);
  }, CLI_TEST_TIMEOUT_MS);

  it('two starts at once in one folder: exactly one comes up', async () => {
    const dir = tempDir();
    reapRedisIn(dir);
    const [a, b] = [spawnStart(dir), spawnStart(dir)];
    const codes = await Promise.race([
      Promise.all([startedApi(a).then(() => 'up', () => 'failed'), startedApi(b).then(() => 'up', () => 'failed')]),
      sleep(40_000).then(() => ['timeout']),
    ]);
    expect(codes.sort(), a.out() + b.out()).toEqual(['failed', 'up']);
    expect(redisServersIn(join(dir, '.baton', 'redis'))).toHaveLength(1);
    for (const s of [a, b]) if (s.child.exitCode === null) s.child.kill('SIGTERM');
    expect((await Promise.all([a.exited, b.exited])).sort()).toEqual([0, 1]);
  }, CLI_TEST_TIMEOUT_MS);
});
