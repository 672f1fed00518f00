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

let local: LocalRedis | undefined;
let dir: string | undefined;
let container: { stop(): Promise<unknown> } | undefined;
let compiled: Promise<CompiledSources> | undefined;

export async function setup(project: TestProject): Promise<void> {
  // Once per run, whichever projects it has.
  compiled ??= compileSources(fileURLToPath(new URL('../../', import.meta.url)));
  project.provide('batonLauncher', (await compiled).launcher);
  if (process.env.TEST_REDIS_URL) {
    project.provide('redisUrl', process.env.TEST_REDIS_URL);
    return;
  }
  const problem = redisServerProblem();
  if (!problem) {
    dir = mkdtempSync(join(tmpdir(), 'baton-test-redis-'));
    local = await startLocalRedis(dir, ['--appendonly', 'no']);
    project.provide('redisUrl', local.url);
    return;
  }
  if (await dockerAvailable()) {
    const { GenericContainer } = await import('testcontainers');
    const c = await new GenericContainer('redis:7-alpine').withExposedPorts(6379).start();
    container = c;
    project.provide('redisUrl', `redis://${c.getHost()}:${c.getMappedPort(6379)}`);
    return;
  }
  throw new Error(
    `Baton tests need a real Redis 7.0 or later: a redis-server of their own, Docker, or TEST_REDIS_URL. ${problem} (Or start Docker, or set TEST_REDIS_URL.)`,
  );
}

export async function teardown(): Promise<void> {
  // Last in the run's output, where a newcomer looks: which checks this machine skipped, and the
  // one command that brings each back (with CI=true those tests failed instead).
  const missing = missingPrograms();
  if (missing.length) {
    console.log(`\nSkipped on this machine: the checks that need ${missing.map((m) => m.program).join(', ')}:`);
    for (const m of missing) console.log(`  ${m.what}: ${m.install}`);
  }
  (await compiled?.catch(() => undefined))?.remove();
  await local?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  await container?.stop();
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
