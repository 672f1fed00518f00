import type { TestProject } from 'vitest/node';
import { redisServerProblem, startLocalRedis, type LocalRedis } from '../../src/cli/local-redis.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { missingPrograms } from './programs.ts';
import { compileSources, type CompiledSources } from './compiled-sources.ts';

/**
 * Gives the whole test run one real Redis of its own: a redis-server on a free port when one
 * of 7.0 or later is on PATH, else a testcontainers Redis when Docker answers, else a clear
 * failure that says what was found.
 * Test files isolate themselves with their own key prefix and runtime (see harness.ts).
 */
declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    /** `baton` run from src/ compiled for this run (compiled-sources.ts): what tests spawn. */
    batonLauncher: string;
  }
}

/** A Redis for the run, and how to stop what was started for it. */
interface RunRedis { url: string; stop(): Promise<void> }

interface Shared { users: number; compiled: Promise<CompiledSources>; redis: Promise<RunRedis> }

/**
 * What every project's setup shares. Vitest loads this file once per project (the root one and
 * quick, for `vitest run <file>`), each copy with its own module state: kept on globalThis, the
 * Redis and the compiled sources are made once per run instead of once per copy, and the last
 * teardown stops them.
 */
const SHARED = Symbol.for('baton.test.global-setup');
const shared = globalThis as { [SHARED]?: Shared };

export async function setup(project: TestProject): Promise<void> {
  const s = (shared[SHARED] ??= {
    users: 0,
    compiled: compileSources(fileURLToPath(new URL('../../', import.meta.url))),
    redis: startRedis(),
  });
  s.users += 1;
  // The quick files spawn the bundled layout (a start costs 40 % less CPU); the long drills
  // spawn the per-module one, which is what dist/ is (compiled-sources.ts).
  const compiled = await s.compiled;
  project.provide('batonLauncher', project.name === 'long' ? compiled.launcher : compiled.bundledLauncher);
  project.provide('redisUrl', (await s.redis).url);
}

async function startRedis(): Promise<RunRedis> {
  if (process.env.TEST_REDIS_URL) return { url: process.env.TEST_REDIS_URL, stop: async () => {} };
  const problem = redisServerProblem();
  if (!problem) {
    const dir = mkdtempSync(join(tmpdir(), 'baton-test-redis-'));
    const local: LocalRedis = await startLocalRedis(dir, ['--appendonly', 'no']);
    return { url: local.url, stop: async () => { await local.stop(); rmSync(dir, { recursive: true, force: true }); } };
  }
  if (await dockerAvailable()) {
    const { GenericContainer } = await import('testcontainers');
    const c = await new GenericContainer('redis:7-alpine').withExposedPorts(6379).start();
    return { url: `redis://${c.getHost()}:${c.getMappedPort(6379)}`, stop: async () => { await c.stop(); } };
  }
  throw new Error(
    `Baton tests need a real Redis 7.0 or later: a redis-server of their own, Docker, or TEST_REDIS_URL. ${problem} (Or start Docker, or set TEST_REDIS_URL.)`,
  );
}

export async function teardown(): Promise<void> {
  const s = shared[SHARED];
  if (!s || --s.users > 0) return;
  delete shared[SHARED];
  // Last in the run's output, where a newcomer looks: which checks this machine skipped, and the
  // one command that brings each back (with CI=true those tests failed instead).
  const missing = missingPrograms();
  if (missing.length) {
    console.log(`\nSkipped on this machine: the checks that need ${missing.map((m) => m.program).join(', ')}:`);
    for (const m of missing) console.log(`  ${m.what}: ${m.install}`);
  }
  (await s.compiled.catch(() => undefined))?.remove();
  await (await s.redis.catch(() => undefined))?.stop();
}

async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}
