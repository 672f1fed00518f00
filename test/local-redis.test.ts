import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { redisServerProblem, startLocalRedis } from '../src/cli/local-redis.ts';

/**
 * `baton start`, the tests and the bench spawn the redis-server on PATH; it must be 7.0 or
 * later (the transitions are a Redis Function library), and anything else is said plainly.
 * A stand-in `redis-server` script on PATH plays the old or missing one.
 */
const PATH = process.env.PATH;
const dirs: string[] = [];
afterEach(() => {
  process.env.PATH = PATH;
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fakeRedisServer(versionLine: string): void {
  const dir = mkdtempSync(join(tmpdir(), 'baton-fake-redis-'));
  dirs.push(dir);
  const bin = join(dir, 'redis-server');
  writeFileSync(bin, `#!/bin/sh\necho '${versionLine}'\n`);
  chmodSync(bin, 0o755);
  process.env.PATH = `${dir}${delimiter}${PATH}`;
}

describe('the redis-server on PATH', () => {
  it('7.0 or later serves; an older one, or none, is named with what to do', async () => {
    fakeRedisServer('Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1');
    expect(redisServerProblem()).toBeUndefined();

    fakeRedisServer('Redis server v=6.0.16 sha=00000000:0 malloc=jemalloc-5.2.1 bits=64 build=1');
    expect(redisServerProblem()).toMatch(/^redis-server 6\.0\.16 is on PATH; Baton needs Redis 7\.0 or later/);
    await expect(startLocalRedis(join(tmpdir(), 'baton-never-started'))).rejects.toThrow(/needs Redis 7\.0 or later/);

    process.env.PATH = join(tmpdir(), 'baton-no-such-dir');
    expect(redisServerProblem()).toMatch(/^redis-server was not found on PATH/);
  });
});

describe('a local redis-server', () => {
  it('in a process group of its own when asked (a terminal\'s Ctrl-C does not reach it); stopped when it cannot start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'baton-local-redis-'));
    dirs.push(dir);
    const pgid = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[2];
    const own = await startLocalRedis(dir, ['--appendonly', 'no'], { ownProcessGroup: true });
    try {
      expect(pgid(own.process.pid!)).toBe(String(own.process.pid));
    } finally {
      await own.stop();
    }
    const shared = await startLocalRedis(dir, ['--appendonly', 'no']);
    try {
      expect(pgid(shared.process.pid!)).toBe(pgid(process.pid));
    } finally {
      await shared.stop();
    }
    expect(own.process.exitCode ?? own.process.signalCode).not.toBeNull();
    // A redis-server that refuses its arguments exits; the error carries its log.
    await expect(startLocalRedis(dir, ['--no-such-option', 'x'])).rejects.toThrow(/redis-server exited/);
  });
});
